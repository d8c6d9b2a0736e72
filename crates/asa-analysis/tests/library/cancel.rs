//! Runs of the library cancelled by their own token (`CancelToken`): what Python's
//! `cancel=` and a signal stop go through.

use crate::common::*;

/// Issue 37: runs hold no process-wide state. Two runs in two threads, the first cancelled
/// by its own token at its first query block: it stops with `Interrupted`, and the second
/// finishes with the numbers the same run gives alone.
#[test]
fn cancelling_one_of_two_runs_in_two_threads_leaves_the_other_whole() {
    use asa_analysis::analysis::{
        CancelToken, ModelSource, Run, RunEvents, RunOptions, RunSpec, Silent,
    };
    use asa_core::Error;

    /// Cancels `token` at the first progress report (the end of the first query block).
    struct CancelAtFirstBlock(CancelToken);
    impl RunEvents for CancelAtFirstBlock {
        fn progress(&mut self, _tokens: u64) {
            self.0.cancel();
        }
    }

    let run = || Run {
        models: vec![ModelSource::at("gqa", model_dir("llama_gqa"))],
        options: RunOptions {
            spec: RunSpec {
                seq_len: 32,
                num_seqs: 4,
                ..RunSpec::default()
            },
            ..RunOptions::default()
        },
        cancel: CancelToken::new(),
    };
    let alone = run().execute(&mut Silent).unwrap();
    let (cancelled, finished) = std::thread::scope(|scope| {
        let first = run();
        let token = first.cancel.clone();
        let cancelled = scope.spawn(move || first.execute(&mut CancelAtFirstBlock(token)));
        let finished = scope.spawn(|| run().execute(&mut Silent));
        (cancelled.join().unwrap(), finished.join().unwrap())
    });
    assert!(
        matches!(cancelled, Err(Error::Interrupted)),
        "{cancelled:?}"
    );
    let finished = finished.unwrap();
    let (a, b) = (alone.tables(), finished.tables());
    assert_eq!(a.len(), b.len());
    for (a, b) in a.iter().zip(&b) {
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "table {}", a.name);
    }
}
