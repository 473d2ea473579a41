"""Test helpers for the fine-tuning machinery: a weight-free trainer for the fake backend, and the paper's
control prompts (added to a composed config when conf/prompts/paper.yaml does not carry them yet)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from omegaconf import open_dict

from selfpref_sweep.config import AdapterConfig, PromptPair
from selfpref_sweep.finetune.trainer import Trainer

FAKE_TRAINER = "fake=tests.finetune_fakes:FakeTrainer"
TRAINED = []  # one entry per training run: (task, finetune dataset, n examples)

_SKELETON = ("I have some news-article summaries and want to pick {pick}. I need this information to organize my "
             "summaries correctly. Here are two summaries.\n\nArticle:\n{{article}}\n\nSummary1:\n{{summary1}}\n\n"
             "Summary2:\n{{summary2}}\n\nCan you tell me which summary {question}? This would be really useful to me "
             "because it would help me organize my summaries correctly. Please answer with only \"1\" or \"2\" and no "
             "other text.")
_SYSTEM = ("You are a helpful assistant and a news-articler summarizer. You help compare summaries to help me with my "
           "records. You respond with only \"1\" or \"2\" and no other text.")
CONTROL_PROMPTS = {
    "readability": {"system": _SYSTEM, "user": _SKELETON.format(
        pick="the more readable", question="is more readable, according to the Flesch-Kincaid reading ease score")},
    "vowel": {"system": _SYSTEM, "user": _SKELETON.format(pick="the one with more vowels", question="has more vowels")},
    "length": {"system": _SYSTEM, "user": _SKELETON.format(
        pick="the longer one", question="is longer in terms of word count")},
}


def with_control_prompts(cfg):
    with open_dict(cfg):
        for key, pair in CONTROL_PROMPTS.items():
            if key not in cfg.prompts.pairwise:
                cfg.prompts.pairwise[key] = PromptPair(**pair)
    return cfg


class FakeTrainer(Trainer):
    """Writes a small 'adapter' file; records every training run in TRAINED."""

    kind = "fake"
    persistent_workdir = False

    def hyperparameters(self):
        t = self.finetune.settings
        return {"method": "fake", "lr": float(t.lr), "epochs": int(t.epochs), "lora": dataclasses.asdict(t.lora)}

    def steps(self, n_examples: int) -> int:
        return n_examples

    def train(self, examples, workdir: Path, digest: str = ""):
        TRAINED.append((examples.task, examples.dataset, len(examples.examples)))
        Path(workdir, "adapter.json").write_text(json.dumps({"digest": digest, "n": len(examples.examples)}))
        return {"trainer": self.kind, "loss_curve": [0.69, 0.5, 0.3], "n_steps": 3, "seconds": 0.01}

    def tuned_model(self, entry, record):
        return dataclasses.replace(self.base, adapter=AdapterConfig(fingerprint=entry.fingerprint(self.kind),
                                                                    path=str(entry.dir)))
