from tf_msemb.evaluation.tables import text_table


def test_labels_values_scale_and_missing_cells_line_up():
    table = text_table([("task", 6, "<"), ("step", 5, ">")],
                       [(("stsb-de-dev", 300), {"spearman": 0.8123}), (("tat", 7), {"accuracy": 0.5})],
                       ["spearman", "accuracy"], scale=100)
    assert table.splitlines() == [
        "task    step  spearman  accuracy",
        "stsb-d   300     81.23         -",
        "tat        7         -     50.00",
    ]


def test_a_long_column_name_widens_its_column():
    table = text_table([("model", 5, "<")], [(("e5",), {"mining f1 (de / fr)": 79.125})], ["mining f1 (de / fr)"])
    assert table.splitlines() == ["model mining f1 (de / fr)", "e5                  79.12"]
