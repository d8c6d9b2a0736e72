//! Which GGUF metadata key (under `{arch}.`) each config.json key of a GGUF file's
//! config.json mirror comes from: a model is validated once, on its resolved description,
//! whatever its file (`RawConfig::resolve`), and a refusal of a GGUF file's value names the
//! key the file has beside the config.json key the rule speaks of.

use asa_core::error::Error;

use super::gguf_config::Meta;

/// config.json keys and the metadata keys the GGUF reader takes them from (the first one
/// present in the file is named).
const SOURCES: &[(&str, &[&str])] = &[
    ("hidden_size", &["embedding_length"]),
    (
        "intermediate_size",
        &["feed_forward_length", "expert_feed_forward_length"],
    ),
    ("num_hidden_layers", &["block_count"]),
    ("num_attention_heads", &["attention.head_count"]),
    ("num_key_value_heads", &["attention.head_count_kv"]),
    ("head_dim", &["attention.key_length"]),
    ("partial_rotary_factor", &["rope.dimension_count"]),
    ("rope_theta", &["rope.freq_base"]),
    ("max_position_embeddings", &["context_length"]),
    (
        "rms_norm_eps",
        &[
            "attention.layer_norm_rms_epsilon",
            "attention.layer_norm_epsilon",
        ],
    ),
    ("layer_norm_epsilon", &["attention.layer_norm_epsilon"]),
    ("layer_norm_eps", &["attention.layer_norm_epsilon"]),
    ("norm_eps", &["attention.layer_norm_rms_epsilon"]),
    ("sliding_window", &["attention.sliding_window"]),
    ("factor", &["rope.scaling.factor"]),
    (
        "original_max_position_embeddings",
        &["rope.scaling.original_context_length"],
    ),
    ("beta_fast", &["rope.scaling.yarn_beta_fast"]),
    ("beta_slow", &["rope.scaling.yarn_beta_slow"]),
    ("mscale_all_dim", &["rope.scaling.yarn_log_multiplier"]),
    ("mscale", &["rope.scaling.yarn_log_multiplier"]),
    ("num_experts", &["expert_count"]),
    ("num_local_experts", &["expert_count"]),
    ("n_routed_experts", &["expert_count"]),
    ("num_experts_per_tok", &["expert_used_count"]),
    ("moe_intermediate_size", &["expert_feed_forward_length"]),
    (
        "shared_intermediate_size",
        &["expert_shared_feed_forward_length"],
    ),
    (
        "shared_expert_intermediate_size",
        &["expert_shared_feed_forward_length"],
    ),
    ("n_shared_experts", &["expert_shared_count"]),
    ("routed_scaling_factor", &["expert_weights_scale"]),
    ("first_k_dense_replace", &["leading_dense_block_count"]),
    ("n_group", &["expert_group_count"]),
    ("topk_group", &["expert_group_used_count"]),
    ("q_lora_rank", &["attention.q_lora_rank"]),
    ("kv_lora_rank", &["attention.kv_lora_rank"]),
    ("qk_rope_head_dim", &["rope.dimension_count"]),
    ("qk_nope_head_dim", &["attention.key_length_mla"]),
    (
        "v_head_dim",
        &["attention.value_length_mla", "attention.value_length"],
    ),
    ("embedding_multiplier", &["embedding_scale"]),
    ("residual_multiplier", &["residual_scale"]),
    ("attention_multiplier", &["attention.scale"]),
    ("logits_scaling", &["logit_scale"]),
    ("logit_scale", &["logit_scale"]),
    ("interleave_moe_layer_step", &["interleave_moe_layer_step"]),
    ("full_attention_interval", &["full_attention_interval"]),
    ("attn_logit_softcapping", &["attn_logit_softcapping"]),
    ("final_logit_softcapping", &["final_logit_softcapping"]),
    ("rope_local_base_freq", &["rope.freq_base_swa"]),
    (
        "sliding_window_pattern",
        &["attention.sliding_window_pattern"],
    ),
    ("mamba_d_state", &["ssm.state_size"]),
    ("mamba_n_groups", &["ssm.group_count"]),
    ("mamba_d_conv", &["ssm.conv_kernel"]),
    ("mamba_n_heads", &["ssm.time_step_rank"]),
    ("mamba_d_ssm", &["ssm.inner_size"]),
    ("linear_num_key_heads", &["ssm.group_count"]),
    ("linear_key_head_dim", &["ssm.state_size"]),
    ("linear_num_value_heads", &["ssm.time_step_rank"]),
    ("linear_conv_kernel_dim", &["ssm.conv_kernel"]),
    ("conv_L_cache", &["shortconv.l_cache"]),
];

/// `err` (a refusal of the mirror's resolve) with the metadata keys of `meta`'s file that
/// the config.json keys it names come from: "... (in this file: metadata
/// qwen3.attention.head_count)".
pub(crate) fn name_sources(err: Error, meta: &Meta) -> Error {
    let Some(problem) = err.problem() else {
        return err;
    };
    // the keys it names, and those a described value (`the q.k scale (from ...)`) names
    let message = problem.to_string();
    let mut named: Vec<String> = Vec::new();
    for (hf, keys) in SOURCES {
        if !problem.keys().contains(hf) && !mentions(&message, hf) {
            continue;
        }
        let present = keys
            .iter()
            .map(|k| meta.key(k))
            .find(|k| meta.content.metadata.contains_key(k));
        if let Some(key) = present.filter(|k| !named.contains(k)) {
            named.push(key);
        }
    }
    match named.is_empty() {
        true => err,
        false => err.with_note(format!("in this file: metadata {}", named.join(", "))),
    }
}

/// Whether `message` names `key` as a whole word (`factor` is not in
/// `partial_rotary_factor`).
fn mentions(message: &str, key: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    message.match_indices(key).any(|(at, _)| {
        let before = message[..at].chars().next_back();
        let after = message[at + key.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn a_key_is_named_only_as_a_whole_word() {
        assert!(mentions("head_dim must be at least 1", "head_dim"));
        assert!(mentions("`factor` 0 must be > 0", "factor"));
        assert!(!mentions(
            "partial_rotary_factor 1.5 must be in (0, 1]",
            "factor"
        ));
        assert!(!mentions("qk_rope_head_dim 3 must be even", "head_dim"));
    }
}
