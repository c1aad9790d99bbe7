import numpy as np

from tf_msemb.evaluation import mining
from tf_msemb.mining import recall
from mining.pools import clustered_pools


def test_exact_candidates_of_a_sample_equal_full_exact_mining():
    x, y, _ = clustered_pools()
    x, y = x.astype(np.float32), y.astype(np.float32)
    forward, backward = mining.margin_candidates(x, y, k=4)
    sample = np.array([3, 17, 400, 999, 1499])
    scores, partners = recall.exact_candidates(x[sample], y, x, k=4)
    np.testing.assert_allclose(scores, [forward[i][0] for i in sample], rtol=1e-6)
    assert partners.tolist() == [forward[i][2] for i in sample]
    targets = np.array([0, 650, 1299])
    scores, partners = recall.exact_candidates(y[targets], x, y, k=4)
    assert partners.tolist() == [backward[j][1] for j in targets]


def test_candidate_recall_counts_same_partner_above_threshold():
    exact_scores = np.array([1.2, 1.1, 1.05, 0.9])
    exact_partners = np.array([5, 6, 7, 8])
    # Same partner and above: kept; other partner: lost; same partner but scored below: lost; below anyway: ignored.
    result = recall.candidate_recall(exact_scores, exact_partners, np.array([1.2, 1.1, 0.99, 1.3]),
                                     np.array([5, 9, 7, 8]), threshold=1.0)
    assert result == {"recall": 1 / 3, "found": 1, "exact": 3}
