"""Aligned text tables of figures, as every command line prints them (dev table, dev curves, MTEB scores)."""


def text_table(heads, rows, columns, scale=1.0):
    """Label columns, then a column per figure name; a missing figure prints `-`.

    `heads`: `[(title, width, align)]` of the label columns (align `<` or `>`;
    a left-aligned label is cut to its width). `rows`: `[(labels, {column:
    value})]`. Values are printed times `scale`, two decimals, in columns at
    least nine wide.
    """
    widths = [max(9, len(column)) for column in columns]

    def line(labels, cells):
        shown = [f"{str(label)[:width] if align == '<' else label:{align}{width}}"
                 for label, (_, width, align) in zip(labels, heads)]
        return " ".join(shown + list(cells))

    lines = [line([title for title, _, _ in heads], (f"{c:>{w}}" for c, w in zip(columns, widths)))]
    for labels, values in rows:
        lines.append(line(labels, (f"{scale * values[c]:>{w}.2f}" if c in values else f"{'-':>{w}}"
                                   for c, w in zip(columns, widths))))
    return "\n".join(lines)
