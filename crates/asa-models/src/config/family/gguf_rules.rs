//! The family that reads a GGUF architecture: the first in the table whose [`GgufRules`]
//! (defined beside the GGUF reader, `crate::gguf_rules`) name it.

use super::Family;
use crate::config::families::FAMILIES;
pub use crate::gguf_rules::*;

impl Family {
    /// The family reading GGUF files of llama.cpp architecture `arch`, with its rules: the
    /// first in the table with rules for it (a family spread into others comes before them,
    /// so it answers for the rules they inherit).
    pub(crate) fn of_gguf(arch: &str) -> Option<(&'static Family, &'static GgufRules)> {
        FAMILIES
            .iter()
            .find_map(|f| f.gguf.filter(|rules| rules.arch == arch).map(|r| (f, r)))
    }

    /// The GGUF architectures read, sorted, for error messages.
    pub(crate) fn gguf_architectures() -> String {
        let mut names: Vec<&str> = FAMILIES
            .iter()
            .filter_map(|f| f.gguf.map(|rules| rules.arch))
            .collect();
        names.sort_unstable();
        names.dedup();
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_gguf_architecture_has_one_set_of_rules_read_by_the_family_defining_it() {
        for family in FAMILIES {
            if let Some(rules) = family.gguf {
                let (_, answering) = Family::of_gguf(rules.arch).unwrap();
                assert!(std::ptr::eq(rules, answering), "{}", rules.arch);
            }
        }
        let model_types: Vec<(&str, &str)> = [
            "llama",
            "qwen2",
            "qwen3",
            "olmo2",
            "phi3",
            "gpt2",
            "gptneox",
            "gemma2",
            "gemma3",
            "smollm3",
            "lfm2",
            "granitehybrid",
            "falcon-h1",
            "glm4moe",
            "deepseek2",
            "qwen3next",
            "llama4",
            "qwen3moe",
            "gpt-oss",
        ]
        .into_iter()
        .map(|arch| (arch, Family::of_gguf(arch).unwrap().0.name))
        .collect();
        assert_eq!(
            model_types,
            [
                ("llama", "llama"),
                ("qwen2", "qwen2"),
                ("qwen3", "qwen3"),
                ("olmo2", "olmo2"),
                ("phi3", "phi3"),
                ("gpt2", "gpt2"),
                ("gptneox", "gpt_neox"),
                ("gemma2", "gemma2"),
                ("gemma3", "gemma3_text"),
                ("smollm3", "smollm3"),
                ("lfm2", "lfm2"),
                ("granitehybrid", "granitemoehybrid"),
                ("falcon-h1", "falcon_h1"),
                ("glm4moe", "glm4_moe"),
                ("deepseek2", "deepseek_v3"),
                ("qwen3next", "qwen3_next"),
                ("llama4", "llama4_text"),
                ("qwen3moe", "qwen3_moe"),
                ("gpt-oss", "gpt_oss"),
            ]
        );
        assert!(Family::of_gguf("mamba").is_none());
    }
}
