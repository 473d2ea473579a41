"""The built-in backends, each declared once here by name: its class and its settings.

`BACKENDS` names each backend's class (a models.base.ModelAPI with identity_for(cfg) and __init__(cfg, model_cache,
show_progress)), imported only when a cell uses it (models.REGISTRY). `BACKEND_SETTINGS` names its settings: a
dataclass of its fields of a model config (evaluator.*, source.*; each with its default and range, schema_fields.py)
in a module of its own that imports nothing but schema_fields, so reading them loads no backend (torch, vllm,
openai). config.ModelConfig is composed at import of these settings and the fields every backend reads
(schema_fields.composed), so adding a backend is its module, its settings module and a line in each table here, and
edits no schema. This module imports nothing: the config reads it without reaching the model stack (models/__init__.py
and what its functions load), which the analysis, reading the config's task names, must not reach.

A plug-in backend (an entry point, $SELFPREF_BACKENDS) has no settings of its own: the schema is the built-ins', so it
does not change with what is installed.
"""


BACKENDS: dict[str, str] = {
    "local": "selfpref_sweep.models.local:LocalModel",
    "openai": "selfpref_sweep.models.openai.openai_api:OpenAIModel",  # OpenAI and OpenAI-compatible servers
    "vllm": "selfpref_sweep.models.vllm.vllm_engine:VLLMModel",  # vLLM in this process (a vLLM server: openai)
}

# "module:Class", in the order of their fields in the config (kept from when they were its base classes); a new
# backend's go last.
BACKEND_SETTINGS: dict[str, str] = {
    "openai": "selfpref_sweep.models.openai.openai_settings:OpenAISettings",
    "vllm": "selfpref_sweep.models.vllm.vllm_settings:VllmSettings",
    "local": "selfpref_sweep.models.local.local_settings:LocalSettings",
}
