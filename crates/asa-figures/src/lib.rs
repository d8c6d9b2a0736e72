//! What people look at: the paper's figures drawn with plotters ([`plot`]), its tables
//! ([`paper`]) and the self-contained HTML report ([`report`]).

pub mod paper;
pub mod plot;
pub mod report;
