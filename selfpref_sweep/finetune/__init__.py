"""Fine-tuning evaluators for self-recognition and control tasks (the paper's section 4).

examples.py builds the training pairs through the cell's own stages and labels them (labels.py);
trainer.py is the one trainer interface and its registry, implemented by local_trainer.py (peft LoRA,
loss on the answer token only) and openai_trainer.py (an OpenAI fine-tuning job); adapters.py caches
each distinct fine-tuned model once; inverse.py is the inverse-causation check; prepare.py is what a
cell calls. Heavy imports (torch, peft, openai) happen only inside the trainers.
"""

from .prepare import (
                      FinetuneResult,
                      finetune_plan,
                      format_plan,
                      planned_judge,
                      planned_training_articles,
                      prepare_finetuned_evaluator,
)

__all__ = ["FinetuneResult", "finetune_plan", "format_plan", "planned_judge", "planned_training_articles",
           "prepare_finetuned_evaluator"]
