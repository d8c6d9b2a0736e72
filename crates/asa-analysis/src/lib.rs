//! Runs: the corpus ([`corpus`]), the analysis of checkpoints into metric tables and run
//! records, shards and their merge ([`analysis`]), and attention statistics while a model
//! trains ([`train`]).

pub mod analysis;
pub mod corpus;
pub mod train;
