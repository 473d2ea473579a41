import pytest
import yaml

from selfpref_sweep.cell.prompts import fill, pairwise_messages, standardize
from tests.conftest import CONF


def test_fill_is_one_pass():
    # An article that mentions a slot name or braces is inserted verbatim, not substituted again.
    out = fill("A:{article} S1:{summary1}", article="see {summary1} and {x}", summary1="one")
    assert out == "A:see {summary1} and {x} S1:one"


def test_pairwise_prompt_is_the_papers():
    prompts = yaml.safe_load((CONF / "prompts" / "paper.yaml").read_text())
    msgs = pairwise_messages(prompts, "recognition", "ART", "S-ONE", "S-TWO")
    assert msgs[0].role == "system" and msgs[0].content.endswith('You respond with only "1" or "2" and no other text.')
    assert ("Article:\nART\n\nSummary1:\nS-ONE\n\nSummary2:\nS-TWO\n\nCan you tell me which summary you wrote?"
            in msgs[1].content)
    pref = pairwise_messages(prompts, "preference", "ART", "S-ONE", "S-TWO")[1].content
    assert pref.startswith("Here are two news-article summaries I found.")
    assert "which summary you prefer?" in pref


def test_standardize():
    assert standardize("  the  council\tvoted ") == "The council voted."
    assert standardize("Done!") == "Done!"
    # CNN highlights: line by line, blank lines dropped
    assert standardize("first point\n\n  second point.\n") == "First point.\nSecond point."
    assert standardize("   ") == ""


# ------------------------------------------------------------------ stripping preambles, bullets, numbering
def configured_rules(**changes):
    """summaries.* as conf/config.yaml sets them (the preamble patterns included), with `changes`."""
    from selfpref_sweep.config import SummariesConfig

    return SummariesConfig(**{**yaml.safe_load((CONF / "config.yaml").read_text())["summaries"], **changes})


# Claude-style answers (the authors removed these artefacts from Claude's summaries by hand) -> the summary text.
CLAUDE_STYLE = [
    ("Here is a one-sentence summary of the news article:\n\nThe council voted to close the library.",
     "The council voted to close the library.", {"preamble"}),
    ("Here's a summary of the article in one sentence: The council voted to close the library.",
     "The council voted to close the library.", {"preamble"}),
    ("Sure! Here is a summary:\nthe council voted to close the library",
     "The council voted to close the library.", {"preamble"}),
    ("Summary: The council voted to close the library.", "The council voted to close the library.", {"preamble"}),
    ("**Summary:**\nThe council voted to close the library.", "The council voted to close the library.",
     {"preamble"}),
    ("Here are 3 highlights of the article:\n\n- Daniel Radcliffe turns 18\n- He gains access to a fortune\n"
     "- He says he won't be extravagant", "Daniel Radcliffe turns 18.\nHe gains access to a fortune.\n"
     "He says he won't be extravagant.", {"preamble", "bullet"}),
    ("Highlights:\n\u2022 Bridge collapsed at rush hour\n\u2022 55 people rescued",
     "Bridge collapsed at rush hour.\n55 people rescued.", {"preamble", "bullet"}),
    ("1. Bridge collapsed at rush hour\n2) 55 people rescued\n(3) Survivors describe a free fall",
     "Bridge collapsed at rush hour.\n55 people rescued.\nSurvivors describe a free fall.", {"numbering"}),
    ("* Judge says the system is unjust\n* New facility planned", "Judge says the system is unjust.\n"
     "New facility planned.", {"bullet"}),
]
# Summary text that merely looks like an artefact stays as it is.
NOT_ARTEFACTS = [
    "3 people died when the bridge collapsed.",
    "1.5 million homes lost power in the storm.",
    "2015 was the warmest year on record.",
    "Sure Start centres will close, the council said.",
    "Here's what we know: the council voted to close the library.",
    "Summary of talks: no deal was reached.",
    "Highlights of the budget include a tax cut.",
    "*NSYNC announced a reunion tour.",
    "-5C temperatures are forecast.",
]


@pytest.mark.parametrize("raw,clean,rules", CLAUDE_STYLE)
def test_preambles_bullets_and_numbering_are_stripped(raw, clean, rules):
    from selfpref_sweep.cell.summaries import standardizer

    text, applied = standardizer(configured_rules()).clean(raw)
    assert text == clean and applied == rules


@pytest.mark.parametrize("text", NOT_ARTEFACTS)
def test_summary_text_that_looks_like_an_artefact_stays(text):
    from selfpref_sweep.cell.summaries import standardizer

    assert standardizer(configured_rules()).clean(text) == (text, frozenset())


def test_the_rules_can_be_switched_off_and_are_counted_per_rule():
    from selfpref_sweep.cell.summaries import clean

    texts = {f"a{i}": raw for i, (raw, _, _) in enumerate(CLAUDE_STYLE)}
    counted = clean("claude", texts, configured_rules())
    expected = {rule: sum(rule in rules for _, _, rules in CLAUDE_STYLE)
                for rule in ("preamble", "bullet", "numbering")}
    assert counted.stripped == expected
    assert counted.texts == {f"a{i}": out for i, (_, out, _) in enumerate(CLAUDE_STYLE)}
    kept = clean("claude", texts, configured_rules(strip_preambles=False, strip_bullets=False))
    assert kept.stripped == {"preamble": 0, "bullet": 0, "numbering": 0}
    assert kept.texts["a0"].startswith("Here is a one-sentence summary") and kept.texts["a8"].startswith("* Judge")
    raw = clean("claude", texts, configured_rules(standardize=False))
    assert raw.stripped == {} and raw.texts["a0"] == CLAUDE_STYLE[0][0]
    # a summary that was only a preamble is empty, hence counted as unusable
    assert clean("x", {"a": "Here is a summary:"}, configured_rules()).problems == {"a": "empty_summary"}


def test_a_bad_preamble_pattern_is_named(compose_cfg):
    from selfpref_sweep.config.validation import validate_config
    from selfpref_sweep.errors import ConfigError

    with pytest.raises(ConfigError, match=r"summaries.preamble_patterns\[0\]='\(unclosed'"):
        validate_config(compose_cfg(["summaries.preamble_patterns=['(unclosed']"]))
