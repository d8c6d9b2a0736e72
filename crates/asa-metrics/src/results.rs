//! What a model's metrics finish into: [`ModelMetrics`], one typed result per asked metric
//! in registry order, each of which writes its own rows of the SPEC section 6 tables.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use super::tables::TableRows;
use super::Metric;
use asa_hooks::Kernel;

/// A result as data: its JSON (run records, tests) and itself as `Any` (typed reads).
pub trait ResultData {
    /// The result as JSON.
    fn to_json(&self) -> serde_json::Value;
    /// Itself as `Any`, for [`ModelMetrics::get`].
    fn as_any(&self) -> &dyn Any;
}

impl<T: serde::Serialize + Any> ResultData for T {
    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A finished metric: it writes its rows of the section 6 tables.
pub trait MetricResult: ResultData + Debug + Send + Sync {
    /// Its rows for model `model`, stored as `metric`.
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows);
}

/// Per (layer, head) means, `[layer][head]`: a `mean` row each in `attention.csv` under
/// the metric's name (sink_mass, gate).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(transparent)]
pub struct PerHead(pub Vec<Vec<f64>>);

impl MetricResult for PerHead {
    fn write_rows(&self, metric: Metric, model: &str, out: &mut TableRows) {
        out.per_head(model, metric.name(), &self.0);
    }
}

/// Everything computed for one model: a result per asked metric that applies to the
/// variant (none for sink_mass without a sink, say).
#[derive(Debug, Clone, Default)]
pub struct ModelMetrics {
    results: Vec<(Metric, Arc<dyn MetricResult>)>,
    /// The kernel that computed each layer (0-based decoder layers), for run.json and
    /// `--verbose`.
    pub kernels: BTreeMap<usize, Kernel>,
    /// The decoder layer (0-based) of each of the results' layers, which count attention
    /// layers only (a hybrid's); empty: the same numbers.
    pub layer_numbers: Vec<usize>,
}

impl ModelMetrics {
    /// Stores `metric`'s result.
    pub fn insert(&mut self, metric: Metric, result: impl MetricResult + 'static) {
        self.results.retain(|(m, _)| *m != metric);
        self.results.push((metric, Arc::new(result)));
    }

    /// Drops `metric`'s result.
    pub fn remove(&mut self, metric: Metric) {
        self.results.retain(|(m, _)| *m != metric);
    }

    /// `metric`'s result, when computed and of type `T`.
    pub fn get<T: 'static>(&self, metric: Metric) -> Option<&T> {
        let (_, result) = self.results.iter().find(|(m, _)| *m == metric)?;
        result.as_any().downcast_ref::<T>()
    }

    /// The decoder layer (0-based) of the results' layer `l`.
    pub fn decoder_layer(&self, l: usize) -> usize {
        self.layer_numbers.get(l).copied().unwrap_or(l)
    }

    /// Every result, in registry order.
    pub fn results(&self) -> impl Iterator<Item = (Metric, &dyn MetricResult)> {
        self.results.iter().map(|(m, r)| (*m, &**r))
    }
}

impl serde::Serialize for ModelMetrics {
    /// `{metric name: result}`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let map: serde_json::Map<String, serde_json::Value> = self
            .results
            .iter()
            .map(|(m, r)| (m.name().to_string(), r.to_json()))
            .collect();
        map.serialize(s)
    }
}
