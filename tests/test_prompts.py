import yaml

from selfpref_sweep.prompts import fill, pairwise_messages, standardize
from tests.conftest import CONF


def test_fill_is_one_pass():
    # An article that mentions a slot name or braces is inserted verbatim, not substituted again.
    out = fill("A:{article} S1:{summary1}", article="see {summary1} and {x}", summary1="one")
    assert out == "A:see {summary1} and {x} S1:one"


def test_pairwise_prompt_is_the_papers():
    prompts = yaml.safe_load((CONF / "prompts" / "paper.yaml").read_text())
    msgs = pairwise_messages(prompts, "recognition", "ART", "S-ONE", "S-TWO")
    assert msgs[0].role == "system" and msgs[0].content.endswith('You respond with only "1" or "2" and no other text.')
    assert "Article:\nART\n\nSummary1:\nS-ONE\n\nSummary2:\nS-TWO\n\nCan you tell me which summary you wrote?" in msgs[1].content
    pref = pairwise_messages(prompts, "preference", "ART", "S-ONE", "S-TWO")[1].content
    assert pref.startswith("Here are two news-article summaries I found.")
    assert "which summary you prefer?" in pref


def test_standardize():
    assert standardize("  the  council\tvoted ") == "The council voted."
    assert standardize("Done!") == "Done!"
    # CNN highlights: line by line, blank lines dropped
    assert standardize("first point\n\n  second point.\n") == "First point.\nSecond point."
    assert standardize("   ") == ""
