"""Fine-tuning machinery on the deterministic fake backend and a weight-free trainer: labels of every task,
balance, train/eval prompt identity, disjoint train/eval articles, the adapter cache, plan mode, and the
inverse-causation check. The real LoRA run is in test_finetune_lora.py, the OpenAI flow in
test_finetune_openai.py."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from selfpref_sweep.cell.dataset_loaders import load_dataset
from selfpref_sweep.cell.inputs import without_training_articles
from selfpref_sweep.cell.judging import pairwise_requests
from selfpref_sweep.cell.pairs import Pair
from selfpref_sweep.config import TooLong
from selfpref_sweep.config.spec import resolve_cell
from selfpref_sweep.errors import ConfigError
from selfpref_sweep.finetune import finetune_plan, format_plan, planned_training_articles, prepare_finetuned_evaluator
from selfpref_sweep.finetune import labels as L
from selfpref_sweep.finetune.examples import (
    OWN_SOURCE,
    available_others,
    build_examples,
    label_examples,
    score_examples,
)
from selfpref_sweep.models import load_model
from selfpref_sweep.store import Store
from tests import finetune_fakes
from tests.conftest import CONF, FAKE_BACKEND, FAKE_EVALUATOR
from tests.finetune_fakes import FAKE_TRAINER, with_control_prompts

OPENAI_BACKEND = "openai=selfpref_sweep.models.openai.openai_api:OpenAIModel"
TASKS = ["recognition", "always_1", "random", "length", "vowel", "readability", "prefer_longer", "score_longer"]


@pytest.fixture(autouse=True)
def _fake_trainer(monkeypatch, tmp_path):
    monkeypatch.setenv("SELFPREF_TRAINERS", FAKE_TRAINER)
    finetune_fakes.TRAINED.clear()


@pytest.fixture
def ft_cfg(compose_cfg, tmp_path):
    """A composed config with the fake evaluator, the fake trainer, the control prompts and a tmp cache."""

    def _make(overrides=(), cache=None):
        cfg = compose_cfg([*FAKE_EVALUATOR, f"paths.model_cache={cache or tmp_path / 'models'}", *overrides])
        return with_control_prompts(cfg)

    return _make


def _prompts(cfg):
    return OmegaConf.to_container(cfg.prompts, resolve=True)


# The resolved facts the tests check (all from the cell spec).
def transfer(cfg):
    return resolve_cell(cfg).transfer


def cell_fields(cfg):
    c = resolve_cell(cfg).coordinates
    return {"finetune_dataset": c.finetune_dataset, "finetune_n_articles": c.finetune_n_articles,
            "transfer": c.transfer}


def eval_dataset_cfg(cfg):
    return resolve_cell(cfg).dataset


def finetune_dataset_cfg(cfg):
    return resolve_cell(cfg).finetune.dataset


# ------------------------------------------------------------------------------------------ labels
def test_control_measures_on_hand_made_summaries():
    assert L.word_count("Two words") == 2 and L.word_count("  one\n") == 1
    assert L.vowel_count("AEIOU aeiou y Y") == 10  # y is not a vowel here
    easy, hard = "The cat sat on the mat.", ("Notwithstanding considerable institutional heterogeneity, "
                                             "comprehensive reorganization necessitates extraordinary deliberation.")
    assert L.reading_ease(easy) > L.reading_ease(hard)
    import textstat

    assert L.reading_ease(easy) == pytest.approx(textstat.flesch_reading_ease(easy))
    assert L.control_label("readability", easy, hard) == "1" and L.control_label("readability", hard, easy) == "2"
    assert L.control_label("length", "a b c", "a b") == "1"
    assert L.control_label("length", "a b", "c d") is None  # tie
    assert L.control_label("vowel", "bcd", "bad") == "2"
    assert L.control_label("vowel", "bat", "cot") is None  # tie
    assert L.control_label("readability", easy, easy) is None


HAND_PAIRS = [
    # (article id, article, own, other key, other)
    ("a1", "Article one.", "Short own summary.", "human", "A much longer summary written by a human being here."),
    ("a2", "Article two.", "An own summary that is clearly the longer of these two.", "human", "Tiny one."),
    ("a3", "Article three.", "Same four words here.", "gpt4", "Also four words here."),  # a length tie
    ("a4", "Article four.", "Bzzt.", "claude", "Aeiou aeiou."),
]


def test_labels_for_every_task_on_hand_made_pairs(compose_cfg):
    prompts = _prompts(with_control_prompts(compose_cfg([])))
    rec, ties, tie_pairs = label_examples("recognition", "recognition", prompts, HAND_PAIRS, seed=0)
    assert (ties, tie_pairs) == (0, 0) and len(rec) == 8
    assert all(ex.answer == str(ex.own_position) for ex in rec)
    assert Counter(ex.answer for ex in rec) == {"1": 4, "2": 4}

    ones, _, _ = label_examples("always_1", "recognition", prompts, HAND_PAIRS, seed=0)
    assert {ex.answer for ex in ones} == {"1"} and len(ones) == 8

    rnd, _, _ = label_examples("random", "recognition", prompts, HAND_PAIRS, seed=3)
    assert Counter(ex.answer for ex in rnd) == {"1": 4, "2": 4}
    again, _, _ = label_examples("random", "recognition", prompts, HAND_PAIRS, seed=3)
    other_seed, _, _ = label_examples("random", "recognition", prompts, HAND_PAIRS * 4, seed=4)
    assert [e.answer for e in rnd] == [e.answer for e in again]  # seeded
    assert Counter(e.answer for e in other_seed) == {"1": 16, "2": 16}

    length, ties, tie_pairs = label_examples("length", "length", prompts, HAND_PAIRS, seed=0)
    assert (ties, tie_pairs) == (2, 1) and len(length) == 6  # the a3 tie: both orders dropped and counted
    by = {(e.article_id, e.own_position): e.answer for e in length}
    assert by[("a1", 1)] == "2" and by[("a1", 2)] == "1"  # the human summary is longer
    assert by[("a2", 1)] == "1" and by[("a2", 2)] == "2"
    assert Counter(e.answer for e in length) == {"1": 3, "2": 3}

    vowel, ties, _ = label_examples("vowel", "vowel", prompts, HAND_PAIRS, seed=0)
    vby = {(e.article_id, e.own_position): e.answer for e in vowel}
    assert vby[("a4", 1)] == "2" and vby[("a4", 2)] == "1"  # "Aeiou aeiou." has more vowels than "Bzzt."
    assert Counter(e.answer for e in vowel) == {"1": len(vowel) // 2, "2": len(vowel) // 2}

    # The positive control asks the preference question and calls the longer summary better: the length
    # labels, under the evaluation's own preference prompt.
    longer, ties, _ = label_examples("prefer_longer", "preference", prompts, HAND_PAIRS, seed=0)
    assert [e.answer for e in longer] == [e.answer for e in length] and ties == 2
    assert all("better" in e.messages[1].content or "prefer" in e.messages[1].content.lower() for e in longer)

    read, _, _ = label_examples("readability", "readability", prompts, HAND_PAIRS, seed=0)
    for e in read:
        s1, s2 = (e.messages[1].content.split("Summary1:\n")[1].split("\n\nSummary2:\n"))
        s2 = s2.split("\n\nCan you tell me")[0]
        assert e.answer == ("1" if L.reading_ease(s1) > L.reading_ease(s2) else "2")


def test_control_examples_use_the_control_question_in_the_recognition_skeleton(compose_cfg):
    prompts = _prompts(with_control_prompts(compose_cfg([])))
    rec, _, _ = label_examples("recognition", "recognition", prompts, HAND_PAIRS[:1], seed=0)
    for task, question in (("length", "which summary is longer in terms of word count?"),
                           ("vowel", "which summary has more vowels?"),
                           ("readability", "which summary is more readable, according to the Flesch-Kincaid")):
        ex, _, _ = label_examples(task, task, prompts, HAND_PAIRS[:1], seed=0)
        user = ex[0].messages[1].content
        assert question in user
        # same skeleton: everything from "Here are two summaries." to the summaries is identical
        assert user.split("Here are two summaries.")[1].split("Can you tell me")[0] == \
            rec[0].messages[1].content.split("Here are two summaries.")[1].split("Can you tell me")[0]
        assert ex[0].messages[0] == rec[0].messages[0]  # the recognition system prompt


def test_rank_levels_grow_with_word_count_and_ties_share_them():
    words = ["a", "a b", "a b c", "a b c d", "a b c d e", "a b c d e f"]
    assert L.rank_levels("score_longer", words, 5) == [0, 1, 2, 2, 3, 4]  # scores 1, 2, 3, 3, 4, 5
    assert L.rank_levels("score_longer", words[::-1], 5) == [4, 3, 2, 2, 1, 0]  # by length, not by position
    assert L.rank_levels("score_longer", ["a b", "c d", "e f g h"], 5) == [1, 1, 4]  # the tie shares rank 0.5
    assert L.rank_levels("score_longer", ["a b", "c d"], 5) is None  # all tie: nothing to learn
    assert L.rank_levels("score_longer", ["a", "a b"], 5) == [0, 4]


def test_the_individual_positive_control_scores_each_summary_alone(compose_cfg):
    """score_longer: one example per distinct summary of an article (the own once, each other source's once), the
    individual preference prompt the evaluation builds, answered by the summary's length level on the 1-5 scale;
    an article whose summaries all tie is dropped and counted."""
    from selfpref_sweep.cell.judging import individual_messages

    prompts = _prompts(compose_cfg([]))
    three_sources = [("a5", "Article five.", "Own one two three.", "human", "Human one."),
                     ("a5", "Article five.", "Own one two three.", "gpt4", "GPT-4 one two three four five.")]
    ex, ties, tie_articles = score_examples("score_longer", "preference", prompts, HAND_PAIRS + three_sources)
    assert (ties, tie_articles) == (2, 1)  # a3: own and gpt4 both four words
    by = {(e.article_id, e.other): e.answer for e in ex}
    assert by == {("a1", OWN_SOURCE): "1", ("a1", "human"): "5", ("a2", OWN_SOURCE): "5", ("a2", "human"): "1",
                  ("a4", OWN_SOURCE): "1", ("a4", "claude"): "5",  # "Bzzt." 1 word, "Aeiou aeiou." 2
                  ("a5", OWN_SOURCE): "3", ("a5", "human"): "1", ("a5", "gpt4"): "5"}
    assert {e.own_position for e in ex if e.other == OWN_SOURCE} == {1} and \
        {e.own_position for e in ex if e.other != OWN_SOURCE} == {0}
    own5 = next(e for e in ex if e.article_id == "a5" and e.other == OWN_SOURCE)
    assert own5.messages == individual_messages(prompts, "preference", "Article five.", "Own one two three.")
    with pytest.raises(ValueError, match="score_examples"):
        label_examples("score_longer", "preference", prompts, HAND_PAIRS, seed=0)
    prompts["individual"].pop("preference")
    with pytest.raises(ConfigError, match="individual.preference"):
        score_examples("score_longer", "preference", prompts, HAND_PAIRS)


def test_missing_control_prompt_names_the_key(compose_cfg):
    prompts = _prompts(compose_cfg([]))
    prompts["pairwise"].pop("vowel", None)
    with pytest.raises(ConfigError, match="pairwise.vowel"):
        label_examples("vowel", "vowel", prompts, HAND_PAIRS, seed=0)


# ------------------------------------------------------------------------------------ examples
def test_examples_from_demo_are_balanced_and_use_the_evaluation_prompt(ft_cfg, tmp_path):
    cfg = ft_cfg(["finetune_task=recognition", "finetune_task.n_articles=4"])
    store = Store(cfg.store.path)
    evaluator = load_model(cfg.evaluator, store, cfg.paths.model_cache, False)
    ex = build_examples(resolve_cell(cfg), evaluator)
    assert ex.others == ["human"] and len(ex.examples) == 4 * 1 * 2
    assert ex.label_balance == {"1": 4, "2": 4}
    assert ex.train_article_ids == [f"demo-{i:02d}" for i in range(1, 5)]
    # train prompt == the prompt the evaluation scores, for the same (article, own, other) pair
    prompts = _prompts(cfg)
    ds = load_dataset(finetune_dataset_cfg(cfg))
    art = ds.articles[0]
    own = [e for e in ex.examples if e.article_id == art.id and e.own_position == 1][0]
    other_text = own.messages[1].content.split("Summary2:\n")[1].split("\n\nCan you tell me")[0]
    own_text = own.messages[1].content.split("Summary1:\n")[1].split("\n\nSummary2:")[0]
    assert own_text.startswith("Fake_eval says:")  # the base evaluator's standardized summary, as in a cell
    eval_req = pairwise_requests(evaluator, prompts, "recognition", Pair(art.id, art.text, own_text, other_text))
    assert own.messages == eval_req["forward"].messages
    back = [e for e in ex.examples if e.article_id == art.id and e.own_position == 2][0]
    assert back.messages == eval_req["backward"].messages and back.answer == "2"


@pytest.mark.parametrize("task", TASKS)
def test_every_task_builds_on_the_paper_data(ft_cfg, paper_data, task):
    cfg = ft_cfg([f"finetune_task={task}", "finetune_dataset=paper_xsum", f"dataset.root={paper_data}",
                  "finetune_task.n_articles=3"])
    store = Store(cfg.store.path)
    ex = build_examples(resolve_cell(cfg), load_model(cfg.evaluator, store, cfg.paths.model_cache, False))
    assert ex.others == ["human", "gpt4", "gpt35", "claude", "llama"]  # 5 others for a non-paper evaluator
    bal = ex.label_balance
    if task == "score_longer":  # one summary at a time: the own and each other's, scored 1-5 by length rank
        assert ex.n_pairs == 3 * 5 and len(ex.examples) + ex.n_ties_dropped == 3 * 6
        assert set(bal) <= {"1", "2", "3", "4", "5"} and bal["1"] >= 3 and bal["5"] >= 3
        return
    assert ex.n_pairs == 3 * 5 and len(ex.examples) + ex.n_ties_dropped == 3 * 5 * 2
    if task == "always_1":
        assert bal == {"1": 30, "2": 0}
    else:
        assert bal["1"] == bal["2"]
    assert ex.train_article_ids[0] == "35232142"


def test_a_paper_evaluator_does_not_count_its_own_paper_summaries_as_others(ft_cfg, paper_data):
    cfg = ft_cfg(["finetune_task=recognition", "finetune_dataset=paper_cnn", f"dataset.root={paper_data}",
                  "evaluator.name=gpt35"])
    ds = load_dataset(finetune_dataset_cfg(cfg))
    # 8N examples
    assert available_others(cfg.evaluator.name, None, True, list(ds.imported)) == ["human", "gpt4", "claude", "llama"]


# ------------------------------------------------------------------------ disjoint train / eval
def test_in_domain_evaluation_starts_after_the_training_articles(ft_cfg):
    cfg = ft_cfg(["finetune_task=recognition", "finetune_task.n_articles=3", "dataset.n_articles=5"])
    assert transfer(cfg) == "in_domain"
    assert cell_fields(cfg) == {"finetune_dataset": "demo", "finetune_n_articles": 3, "transfer": "in_domain"}
    train = load_dataset(finetune_dataset_cfg(cfg)).articles
    evald = load_dataset(eval_dataset_cfg(cfg)).articles
    assert [a.id for a in train] == ["demo-01", "demo-02", "demo-03"]
    assert [a.id for a in evald] == ["demo-04", "demo-05", "demo-06", "demo-07", "demo-08"]
    assert not {a.id for a in train} & {a.id for a in evald}
    # explicit finetune_dataset=demo is the same
    cfg2 = ft_cfg(["finetune_task=length", "finetune_dataset=demo", "finetune_task.n_articles=3", "dataset.offset=1"])
    assert eval_dataset_cfg(cfg2).offset == 3 and transfer(cfg2) == "in_domain"
    cfg3 = ft_cfg(["finetune_task=length", "finetune_task.n_articles=3", "dataset.offset=6"])
    assert eval_dataset_cfg(cfg3).offset == 6  # already past the training articles


def test_cross_dataset_evaluation_keeps_its_articles(ft_cfg, paper_data):
    cfg = ft_cfg(["finetune_task=recognition", "finetune_dataset=paper_xsum", "dataset=paper_cnn",
                  f"dataset.root={paper_data}", "dataset.n_articles=4"])
    assert transfer(cfg) == "cross_dataset"
    assert eval_dataset_cfg(cfg).offset == 0
    assert finetune_dataset_cfg(cfg).root == str(paper_data)  # follows dataset.root
    same = ft_cfg(["finetune_task=recognition", "finetune_dataset=paper_xsum", "dataset=paper_xsum",
                   f"dataset.root={paper_data}", "dataset.n_articles=4", "finetune_task.n_articles=10"])
    assert transfer(same) == "in_domain"
    ev = load_dataset(eval_dataset_cfg(same)).articles
    tr = load_dataset(finetune_dataset_cfg(same)).articles
    assert len(ev) == 4 and len(tr) == 10 and not {a.id for a in ev} & {a.id for a in tr}


def test_training_articles_are_dropped_by_id_when_orders_differ(ft_cfg, tmp_path):
    cfg = ft_cfg(["finetune_task=recognition", "finetune_task.n_articles=4", "finetune_dataset=demo",
                  "dataset.seed=7", "dataset.n_articles=14"])
    store = Store(cfg.store.path)
    result = prepare_finetuned_evaluator(resolve_cell(cfg), load_model(cfg.evaluator, store, cfg.paths.model_cache,
                                                                       False))
    assert eval_dataset_cfg(cfg).offset == 0  # a differently shuffled list: offsets do not help...
    kept, dropped = without_training_articles(load_dataset(eval_dataset_cfg(cfg)).articles,
                                              result.train_article_ids)
    assert dropped == 4 and not {a.id for a in kept} & set(result.train_article_ids)  # ...ids do
    assert planned_training_articles(resolve_cell(cfg)) == result.train_article_ids  # plan mode drops them too


# ----------------------------------------------------------------------------------- the cache
def _prepare(cfg):
    store = Store(cfg.store.path)
    evaluator = load_model(cfg.evaluator, store, cfg.paths.model_cache, False)
    return prepare_finetuned_evaluator(resolve_cell(cfg), evaluator), evaluator


def test_adapter_is_trained_once_and_reused_by_every_cell(ft_cfg, paper_data, tmp_path):
    common = ["finetune_task=recognition", "finetune_task.n_articles=2", "finetune_dataset=paper_xsum",
              f"dataset.root={paper_data}", "source=paper_gpt4"]
    first, base = _prepare(ft_cfg([*common, "dataset=paper_xsum"]))
    assert first.trained and finetune_fakes.TRAINED == [("recognition", "paper_xsum", 20)]
    second, _ = _prepare(ft_cfg([*common, "dataset=paper_cnn", "source=human"]))  # another cell: transfer
    assert not second.trained and len(finetune_fakes.TRAINED) == 1  # the second cell trains nothing
    assert second.fingerprint == first.fingerprint and second.entry_dir == first.entry_dir
    assert second.record["loss_curve"] == [0.69, 0.5, 0.3]
    # the fine-tuned evaluator's identity carries the adapter; the base's does not
    judge = load_model(first.model, Store(tmp_path / "calls.sqlite"), str(tmp_path), False)
    assert judge.identity.adapter == first.fingerprint and base.identity.adapter is None
    assert judge.identity != base.identity and judge.identity.name == base.identity.name
    # what is on disk
    rec = json.loads((first.entry_dir / "finetune.json").read_text())
    assert rec["n_examples"] == 20 and rec["label_balance"] == {"1": 10, "2": 10}
    assert len((first.entry_dir / "examples.jsonl").read_text().splitlines()) == 20
    block = first.summary_block()
    for key in ("task", "dataset", "n_articles", "loss_curve", "seconds", "n_examples", "n_ties_dropped",
                "label_balance", "fingerprint"):
        assert key in block, key
    json.dumps(block)


def test_the_cache_key_separates_what_changes_the_model(ft_cfg, paper_data, tmp_path):
    base = ["finetune_task=recognition", "finetune_task.n_articles=2"]
    fps = set()
    for extra in ([], ["finetune_task.seed=1"], ["finetune_task.lr=0.001"], ["finetune_task.n_articles=3"],
                  ["finetune_task=random"], ["finetune_task=always_1"], ["finetune_task.lora.r=4"]):
        result, _ = _prepare(ft_cfg([*base, *extra]))
        fps.add(result.fingerprint)
    assert len(fps) == 7 and len(finetune_fakes.TRAINED) == 7  # always_1 and random are distinct models
    # the data folder's location is not part of the key
    import shutil

    moved = tmp_path / "moved-paper-data"
    shutil.copytree(paper_data, moved)
    a, _ = _prepare(ft_cfg([*base, "finetune_dataset=paper_xsum", f"dataset.root={paper_data}"]))
    b, _ = _prepare(ft_cfg([*base, "finetune_dataset=paper_xsum", f"finetune_dataset.root={moved}"]))
    assert a.fingerprint == b.fingerprint and not b.trained


def test_a_failed_training_leaves_no_entry(ft_cfg, monkeypatch):
    cfg = ft_cfg(["finetune_task=recognition", "finetune_task.n_articles=2"])

    def boom(self, examples, workdir, digest=""):
        raise RuntimeError("killed mid-training")

    with monkeypatch.context() as m:
        m.setattr(finetune_fakes.FakeTrainer, "train", boom)
        with pytest.raises(RuntimeError):
            _prepare(cfg)
    root = cfg.paths.model_cache
    from pathlib import Path

    leftovers = [p for p in (Path(root) / "finetunes").iterdir() if p.is_dir()]
    assert leftovers == []  # the staging directory is gone; nothing looks complete
    result, _ = _prepare(cfg)
    assert result.trained


def test_no_finetune_changes_nothing(ft_cfg):
    cfg = ft_cfg([])
    spec = resolve_cell(cfg)
    assert prepare_finetuned_evaluator(spec, None) is None
    assert cell_fields(cfg) == {"finetune_dataset": None, "finetune_n_articles": None, "transfer": "none"}
    assert eval_dataset_cfg(cfg) == OmegaConf.to_object(cfg.dataset)
    assert finetune_plan(spec) is None and format_plan(None) == "finetune: none"


# ------------------------------------------------------------------------------------------ plan
@pytest.mark.parametrize("evaluator", ["gpt35", "llama2", "qwen05"])
@pytest.mark.parametrize("task", ["length", "vowel", "recognition"])
def test_plan_says_what_would_be_trained_without_training(compose_cfg, tmp_path, monkeypatch, evaluator, task):
    monkeypatch.delenv("SELFPREF_TRAINERS", raising=False)
    monkeypatch.setenv("SELFPREF_BACKENDS", f"{FAKE_BACKEND},{OPENAI_BACKEND}")  # until models/__init__ lists it
    cfg = with_control_prompts(compose_cfg([f"evaluator={evaluator}", f"finetune_task={task}",
                                            f"paths.model_cache={tmp_path}"]))
    plan = finetune_plan(resolve_cell(cfg))
    assert plan["status"] == "absent" and plan["n_examples"] == 2 * 1 * 2  # demo: the human reference only
    assert plan["trainer"] == ("openai" if evaluator == "gpt35" else "lora")
    assert plan["eval_offset"] == 2 and plan["transfer"] == "in_domain"
    line = format_plan(plan)
    assert task in line and evaluator in line and ("would" in line)
    assert not (tmp_path / "finetunes").exists() or not any((tmp_path / "finetunes").iterdir())


def test_plan_sees_a_cached_adapter(ft_cfg, paper_data):
    cfg = ft_cfg(["finetune_task=vowel", "finetune_dataset=paper_xsum", f"dataset.root={paper_data}",
                  "dataset=paper_cnn"])
    plan = finetune_plan(resolve_cell(cfg))
    assert plan["status"] == "absent" and plan["n_examples"] == 2 * 5 * 2 and plan["n_examples_is_upper_bound"]
    assert "<= 20 examples" in format_plan(plan) and plan["transfer"] == "cross_dataset"
    one_at_a_time = finetune_plan(resolve_cell(ft_cfg(["finetune_task=score_longer", "finetune_dataset=paper_xsum",
                                                         f"dataset.root={paper_data}", "dataset=paper_cnn"])))
    assert one_at_a_time["n_examples"] == 2 * (5 + 1) and "<= 12 examples" in format_plan(one_at_a_time)
    assert not one_at_a_time["prompt_missing"]  # it asks the individual preference prompt, which exists
    _prepare(cfg)
    assert finetune_plan(resolve_cell(cfg))["status"] == "ready" and "cached" in format_plan(
        finetune_plan(resolve_cell(cfg)))


def test_every_task_and_finetune_dataset_composes():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for task in ["none", *TASKS]:
            for ds in ["none", "demo", "xsum", "cnn", "paper_xsum", "paper_cnn"]:
                cfg = compose("config", overrides=[f"finetune_task={task}", f"finetune_dataset={ds}"])
                assert str(getattr(cfg.finetune_task.name, "value", cfg.finetune_task.name)) == task
                assert (cfg.finetune_dataset is None) == (ds == "none")
        for n in (2, 10, 500):  # every N of the paper is expressible
            cfg = compose("config", overrides=["finetune_task=recognition", f"finetune_task.n_articles={n}"])
            assert cfg.finetune_task.n_articles == n


# -------------------------------------------------------------------------------- inverse check
def test_inverse_check_compares_new_and_old_summaries(ft_cfg):
    from selfpref_sweep.finetune.inverse import inverse_check

    cfg = ft_cfg(["finetune_task=recognition", "finetune_task.n_articles=2", "dataset.n_articles=3"])
    result, base = _prepare(cfg)
    store = base.store
    tuned = load_model(result.model, store, cfg.paths.model_cache, False)
    ds = load_dataset(eval_dataset_cfg(cfg))
    out = inverse_check(resolve_cell(cfg), base, tuned, result.model, ds, ds.articles)
    assert out["n_items"] == 3 and out["preference"]["n"] == 3
    assert 0 <= out["preference"]["mean"] <= 1
    assert tuned.calls > 0  # the tuned model wrote its own summaries (its identity differs from the base's)


def test_training_articles_follow_the_cells_length_rule(ft_cfg):
    from selfpref_sweep.cell import articles as cell  # the rule every cell applies
    cfg = ft_cfg(["finetune_task=recognition", "finetune_task.n_articles=2", "evaluator.context_tokens=800"])
    store = Store(cfg.store.path)
    ex = build_examples(resolve_cell(cfg), load_model(cfg.evaluator, store, cfg.paths.model_cache, False))
    spec = resolve_cell(cfg)
    budget = cell.article_budget([spec.evaluator], spec.summaries.max_new_tokens, spec.articles)
    art = load_dataset(finetune_dataset_cfg(cfg)).articles[0]
    fitted = cell.fit_article(art, budget, TooLong.truncate)
    assert fitted is not art and ex.n_articles_truncated >= 1
    shown = ex.examples[0].messages[1].content.split("Article:\n")[1].split("\n\nSummary1:")[0]
    assert shown == fitted.text  # the prompt the evaluation would build for this article
    plain = ft_cfg(["finetune_task=recognition", "finetune_task.n_articles=2"])
    assert _prepare(cfg)[0].fingerprint != _prepare(plain)[0].fingerprint  # the rule is part of the key
