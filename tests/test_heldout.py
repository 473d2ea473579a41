"""The held-out harness (analysis/study/heldout.py): its truths, its draws, one sweep through the records, and
its one-sided verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from selfpref_sweep.analysis.study import heldout
from selfpref_sweep.analysis.study.heldout import HeldoutDesign, one_sided


def test_the_true_deltas_put_every_arm_on_the_line_and_the_null_arms_at_zero():
    truth = heldout.true_deltas(HeldoutDesign())
    for task, n, delta, _bias in HeldoutDesign().arms:
        for scale in ("paper", "logodds"):
            assert truth[(task, n, "rec", scale)] == truth[(task, n, "pref", scale)]
        assert truth[(task, n, "rec", "logodds")] == delta
        # the squashing score keeps the sign and shrinks the size
        assert np.sign(truth[(task, n, "rec", "paper")]) == np.sign(delta) or abs(delta) == 0
    for task in ("length", "vowel"):
        assert abs(truth[(task, 10, "rec", "paper")]) < 1e-3


def test_both_questions_have_the_same_distribution_within_each_evaluator():
    """What makes the specificity and interaction nulls exact: per evaluator, the two questions' paper scores
    have the same mean (checked over many articles), and the evaluators' means differ as planted."""
    design = HeldoutDesign(n_articles=4000, adapters_per_arm=1, adapter_sd=0.0)  # one adapter's own deviation
    # moves its two questions apart by a single draw; over adapters they have the same distribution
    cells = heldout.draw_sweep(design, np.random.default_rng(3))
    for k in range(len(design.units())):
        c = cells[(k, design.datasets[0], design.sources[0])]
        score = 0.5 * (c["p_forward"] + c["p_backward"])
        assert abs(score[:, 0].mean() - score[:, 1].mean()) < 0.03, k
    base = cells[(0, design.datasets[0], design.sources[0])]
    top = cells[(3, design.datasets[0], design.sources[0])]  # recognition, N = 50: Δ 1.1 on log-odds
    assert (top["p_forward"] + top["p_backward"]).mean() > (base["p_forward"] + base["p_backward"]).mean() + 0.2


def test_one_sweep_goes_through_the_records_and_scores_every_figure():
    design = HeldoutDesign(n_articles=4, adapters_per_arm=2)
    rec = heldout.heldout_rep((design, 0, 7))
    prefixes = {k.split("|")[0] for k in rec["counts"]}
    assert prefixes == {"specificity", "interaction", "null arm excluded", "arm coverage"}
    arms = sum(c[1] for k, c in rec["counts"].items() if k.startswith("arm coverage"))
    assert arms == len(design.arms) * len(design.datasets) * 4  # both questions, both scales
    table = heldout.figures([rec, heldout.heldout_rep((design, 1, 7))])
    assert set(table["figure"]) == {f[1] for f in heldout.FIGURES}
    pooled = table[table["row"] == "all rows pooled"]
    assert len(pooled) == 4 and (pooled["trials"] > 0).all()
    text = heldout.markdown(table, design, "cmd", 1.0, 2)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == len(table) + 1 and all(line.count("|") == 7 for line in rows)


@pytest.mark.parametrize(("rate", "se", "kind", "verdict"), [
    (0.05, 0.01, "size", "holds"), (0.07, 0.01, "size", "holds"), (0.12, 0.02, "size", "fails"),
    (0.08, 0.01, "size", "undecided"), (0.95, 0.01, "coverage", "holds"), (0.85, 0.02, "coverage", "fails"),
    (0.92, 0.01, "coverage", "undecided"), (0.0, 0.0, "size", "holds"), (1.0, 0.0, "size", "fails"),
])
def test_the_one_sided_verdicts(rate, se, kind, verdict):
    assert one_sided(rate, se, kind, 200) == verdict


def test_the_command_rejects_a_design_it_cannot_draw(capsys):
    assert heldout.main(["--reps", "1"]) == 2
    assert heldout.main(["--articles", "2"]) == 2
    assert "error" in capsys.readouterr().err


def test_an_adapter_s_training_deviation_is_the_same_on_every_dataset():
    """Training randomness belongs to the adapter: with nothing else random but it, an adapter's mean signal
    moves by the same amount on both datasets."""
    design = HeldoutDesign(n_articles=3, adapters_per_arm=2, adapter_sd=1.0, article_sd=0.0, summary_sd=0.0,
                           arm_article_sd=0.0, item_sd=0.0, order_scale=1e-9, low_mass_rate=0.0)
    cells = heldout.draw_sweep(design, np.random.default_rng(1))
    logit = {key: np.log(c["p_forward"] / (1 - c["p_forward"])) for key, c in cells.items()}
    k, source = 1, design.sources[0]  # the first adapter
    first, second = (logit[(k, d, source)] for d in design.datasets)
    assert np.allclose(first, second, atol=1e-6) and not np.allclose(first, logit[(0, design.datasets[0], source)])
