"""How the in-process vLLM engine is sized (models/vllm/vllm_sizing.py): from the cell's requests, not from the
model's whole context or a fraction of the machine (those failed to start on a 16 GiB machine)."""

from __future__ import annotations

import pytest

from selfpref_sweep.models.vllm import vllm_sizing as sizing

QWEN05 = {"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_size": 896,
          "max_position_embeddings": 32768}


def test_the_length_covers_the_request_with_headroom_in_whole_steps():
    assert sizing.engine_length(100, 32768) == sizing.MIN_LENGTH
    assert sizing.engine_length(1500, 32768) == 3072  # 1,500 + 1,024 headroom, rounded up to 1,024s
    assert sizing.engine_length(32000, 32768) == 32768  # never beyond the model's context
    assert sizing.engine_length(1500, None) == 3072


def test_a_configured_length_is_kept_and_a_request_beyond_it_is_refused():
    assert sizing.engine_length(100, 32768, configured=4096) == 4096
    with pytest.raises(ValueError, match="5000 tokens"):
        sizing.engine_length(5000, 32768, configured=4096)
    with pytest.raises(ValueError, match="model context 4096"):
        sizing.engine_length(5000, 4096)


def test_kv_bytes_per_token_from_the_config():
    # 24 layers x keys and values x 2 heads x 64 dims x 4 bytes
    assert sizing.kv_bytes_per_token(QWEN05, "float32") == 24 * 2 * 2 * 64 * 4
    assert sizing.kv_bytes_per_token(QWEN05, "bfloat16") == 24 * 2 * 2 * 64 * 2
    assert sizing.kv_bytes_per_token({"text_config": QWEN05}, "float32") == 24 * 2 * 2 * 64 * 4
    assert sizing.kv_bytes_per_token({"hidden_size": 8}, "float32") is None
    assert sizing.model_context(QWEN05) == 32768 and sizing.model_context({}) is None


def test_the_cpu_cache_holds_a_few_sequences_of_the_engine_length():
    per_token = sizing.kv_bytes_per_token(QWEN05, "float32")
    assert sizing.cpu_kv_bytes(per_token, 2048) == per_token * 2048 * sizing.CPU_KV_SEQUENCES
    assert sizing.cpu_kv_bytes(per_token, 2048) < 0.5 * sizing.GIB  # qwen05: 0.38 GiB, not 30% of the machine
    assert sizing.cpu_kv_bytes(None, 2048) == sizing.GIB


def test_a_short_machine_gets_the_memory_it_found_and_the_settings_to_change():
    assert sizing.cpu_shortfall(2 * sizing.GIB, sizing.GIB, 12 * sizing.GIB) is None
    message = sizing.cpu_shortfall(2 * sizing.GIB, sizing.GIB, 3 * sizing.GIB)
    assert "4.5 GiB" in message and "3.0 GiB is available" in message
    assert "evaluator.vllm_kv_cache_gib" in message and "evaluator.vllm_max_model_len" in message


def test_weights_bytes_counts_weight_files_only(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x" * 100)
    (tmp_path / "tokenizer.json").write_bytes(b"x" * 50)
    assert sizing.weights_bytes(tmp_path) == 100
    assert sizing.weights_bytes(tmp_path / "not-there") == 0
