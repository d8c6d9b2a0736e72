//! Tables 1-3 of the paper (SPEC section 10): per (model size, method), Delta Params against
//! the same size's baseline, the final training loss, the perplexity of an `analyze` run and
//! the zero-shot accuracies of lm-eval-harness, laid out as the paper lays them out, in
//! Markdown, LaTeX and a tidy table. A missing input leaves an empty cell and a note.

pub mod checks;
pub mod layout;
pub mod lm_eval;
pub mod method;
pub mod runs;
pub mod typeset;
pub mod values;

pub use asa_record::checkpoint_facts::CheckpointFacts;
pub use layout::{build_tables, paper_tables, PaperRow, PaperTable};
pub use method::Method;
pub use runs::{PaperRun, RunSet};
pub use values::{run_values, Cell, RunValues, Task, ValueOptions, TASKS};
