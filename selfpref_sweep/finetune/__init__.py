"""Fine-tuning evaluators for self-recognition and control tasks (the paper's section 4).

examples.py builds the training pairs and labels (labels.py), local_trainer.py trains a LoRA adapter
(peft, loss on the answer token only), openai_trainer.py runs an OpenAI fine-tuning job, adapters.py
caches each distinct fine-tuned model once, inverse.py is the inverse-causation check, and api.py is
what a cell calls. Heavy imports (torch, peft, openai) happen only inside the trainers.
"""

from .api import (FinetuneResult, cell_fields, drop_training_articles, eval_dataset_cfg, finetune_plan, format_plan,
                  is_finetuned, log_to_wandb, planned_evaluator_cfg, prepare_finetuned_evaluator, transfer)

__all__ = ["FinetuneResult", "cell_fields", "drop_training_articles", "eval_dataset_cfg", "finetune_plan",
           "format_plan", "is_finetuned", "log_to_wandb", "planned_evaluator_cfg", "prepare_finetuned_evaluator",
           "transfer"]
