//! Training logs (SPEC section 5): CSV, JSON Lines, W&B exports and TensorBoard events read
//! into series, gradient-norm statistics, median + k * MAD spike counts and smoothed curves.

pub mod stats;
