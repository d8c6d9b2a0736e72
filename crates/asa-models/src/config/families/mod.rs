//! One file per model family (`model_type`), each a [`Family`] constant; [`FAMILIES`] is
//! the one table resolution looks them up in.

use super::family::Family;

mod cohere2;
mod deepseek_v3;
mod falcon_h1;
mod gemma2;
mod gemma3;
mod glm4_moe;
mod gpt2;
mod gpt_neox;
mod gpt_oss;
pub(crate) mod granitemoehybrid;
mod lfm2;
pub(crate) mod llama;
mod llama4_text;
mod mistral;
mod mixtral;
mod olmo2;
mod olmo3;
mod phi3;
mod qwen2;
mod qwen3;
pub(crate) mod qwen3_moe;
mod qwen3_next;
mod smollm3;

/// Every family the loader implements.
pub(crate) static FAMILIES: &[Family] = &[
    llama::FAMILY,
    llama4_text::FAMILY,
    qwen2::FAMILY,
    qwen3::FAMILY,
    qwen3_moe::FAMILY,
    qwen3_next::FAMILY,
    granitemoehybrid::FAMILY,
    falcon_h1::FAMILY,
    mistral::FAMILY,
    mixtral::FAMILY,
    phi3::FAMILY,
    olmo2::FAMILY,
    olmo3::FAMILY,
    smollm3::FAMILY,
    lfm2::FAMILY,
    gemma2::FAMILY,
    gemma3::FAMILY,
    glm4_moe::FAMILY,
    deepseek_v3::FAMILY,
    gpt_oss::FAMILY,
    gpt2::FAMILY,
    gpt_neox::FAMILY,
    cohere2::FAMILY,
];
