import json

import pytest
from omegaconf import OmegaConf

from selfpref_sweep.cell.dataset_loaders import load_dataset
from selfpref_sweep.errors import DataError


def cfg(**kw):
    base = dict(name="t", kind="demo", task="xsum", n_articles=None, offset=0, seed=None, root=None,
                paper_name=None, hf_path=None, hf_name=None, split="train", id_field="id",
                text_field="document", summary_field="summary")
    base.update(kw)
    return OmegaConf.create(base)


def test_demo_dataset_is_shipped_and_complete():
    ds = load_dataset(cfg())
    assert len(ds.articles) >= 12
    assert len({a.id for a in ds.articles}) == len(ds.articles)
    for a in ds.articles:
        assert len(a.text.split()) > 60 and a.reference and len(a.reference.split()) <= 30


def test_selection_offset_and_seed():
    all_ids = [a.id for a in load_dataset(cfg()).articles]
    assert [a.id for a in load_dataset(cfg(n_articles=3, offset=2)).articles] == all_ids[2:5]
    a = [x.id for x in load_dataset(cfg(n_articles=4, seed=7)).articles]
    b = [x.id for x in load_dataset(cfg(n_articles=4, seed=7)).articles]
    assert a == b and a != all_ids[:4] and set(a) <= set(all_ids)


def write_paper_layout(root, ds="xsum", articles=None, sources=None):
    (root / "articles").mkdir(parents=True)
    (root / "summaries" / ds).mkdir(parents=True)
    articles = articles or {"11": "First article.", "22": "Second article.", "33": "Third."}
    (root / "articles" / f"{ds}_train_articles.json").write_text(json.dumps(articles))
    for key, summaries in (sources or {}).items():
        (root / "summaries" / ds / f"{ds}_train_{key}_responses.json").write_text(json.dumps(summaries))


def test_paper_layout_loader(tmp_path):
    write_paper_layout(tmp_path, sources={"human": {"11": "h1", "22": "h2", "33": "h3"},
                                          "gpt4": {"11": "g1", "33": "g3"}})
    ds = load_dataset(cfg(kind="paper", paper_name="xsum", root=str(tmp_path), n_articles=2))
    assert [a.id for a in ds.articles] == ["11", "22"]  # file order
    assert ds.articles[0].reference == "h1"
    assert ds.summary("gpt4", "11") == "g1" and ds.summary("gpt4", "22") is None
    assert set(ds.imported) == {"human", "gpt4"}


def test_paper_layout_errors(tmp_path):
    with pytest.raises(DataError, match="dataset.root"):
        load_dataset(cfg(kind="paper", paper_name="xsum", root=None))
    with pytest.raises(DataError, match="not a folder"):
        load_dataset(cfg(kind="paper", paper_name="xsum", root=str(tmp_path / "nope")))
    (tmp_path / "articles").mkdir()
    (tmp_path / "articles" / "xsum_train_articles.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        load_dataset(cfg(kind="paper", paper_name="xsum", root=str(tmp_path)))
    (tmp_path / "articles" / "xsum_train_articles.json").write_bytes(b'{"1": "caf\xe9"}')
    with pytest.raises(DataError, match="UTF-8"):
        load_dataset(cfg(kind="paper", paper_name="xsum", root=str(tmp_path)))


def test_real_paper_data(paper_data):
    ds = load_dataset(cfg(kind="paper", paper_name="cnn", task="cnn", root=str(paper_data), n_articles=2))
    assert len(ds.articles) == 2 and len(ds.articles[0].id) == 40
    assert set(ds.imported) == {"human", "gpt4", "gpt35", "claude", "llama"}
    assert "Radcliffe" in ds.articles[0].reference


def test_hf_loader_on_a_local_dataset(tmp_path):
    rows = [{"id": f"x{i}", "document": f"Article number {i}.", "summary": f"Summary {i}."} for i in range(6)]
    (tmp_path / "xsum_local").mkdir()
    with open(tmp_path / "xsum_local" / "train.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    ds = load_dataset(cfg(kind="hf", hf_path=str(tmp_path / "xsum_local"), n_articles=3, offset=1))
    assert [a.id for a in ds.articles] == ["x1", "x2", "x3"]
    assert ds.articles[0].text == "Article number 1." and ds.articles[0].reference == "Summary 1."
    with pytest.raises(DataError, match="no column"):
        load_dataset(cfg(kind="hf", hf_path=str(tmp_path / "xsum_local"), text_field="article"))
    with pytest.raises(DataError, match="Could not load"):
        load_dataset(cfg(kind="hf", hf_path=str(tmp_path / "missing_dataset_dir")))


def test_duplicate_ids_are_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.jsonl").write_text(
        '{"id": "a", "document": "x", "summary": "y"}\n{"id": "a", "document": "z", "summary": "w"}\n')
    with pytest.raises(DataError, match="duplicate"):
        load_dataset(cfg(kind="hf", hf_path=str(tmp_path / "d")))
