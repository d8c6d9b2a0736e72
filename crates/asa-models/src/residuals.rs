//! The residual stream of a layer-major pass between layers: every batch's hidden states,
//! held in memory or (when they would pass the memory budget) spilled to a scratch file,
//! one batch in memory at a time. A spilled batch is written as f32 and read back as it was
//! (the round trip is exact), and the file is removed when the pass ends.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};

use asa_core::error::{Error, Result};

/// Every batch's residual stream `[batch, T, hidden]`.
pub struct Residuals {
    held: Vec<Option<Tensor>>,
    spill: Option<Spill>,
}

/// The scratch file and where each batch lies in it.
struct Spill {
    path: PathBuf,
    file: File,
    /// Per batch: byte offset, shape, dtype, device.
    slots: Vec<(u64, Vec<usize>, DType, Device)>,
}

impl Residuals {
    /// An empty stream, held in memory, or spilled to a new file `spill_to`.
    pub fn new(spill_to: Option<&Path>) -> Result<Self> {
        let spill = match spill_to {
            None => None,
            Some(path) => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .map_err(|e| Error::io(path, e))?;
                Some(Spill {
                    path: path.to_path_buf(),
                    file,
                    slots: Vec::new(),
                })
            }
        };
        Ok(Residuals {
            held: Vec::new(),
            spill,
        })
    }

    /// Number of batches.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Adds the next batch's stream.
    pub fn push(&mut self, xs: Tensor) -> Result<()> {
        self.held.push(None);
        let k = self.held.len() - 1;
        if let Some(spill) = &mut self.spill {
            let offset = spill.slots.last().map_or(0, |(o, shape, _, _)| {
                o + 4 * shape.iter().product::<usize>() as u64
            });
            let slot = (offset, xs.dims().to_vec(), xs.dtype(), xs.device().clone());
            spill.slots.push(slot);
        }
        self.put(k, xs)
    }

    /// Batch `k`'s stream (read back from the scratch file when spilled).
    pub fn take(&mut self, k: usize) -> Result<Tensor> {
        if let Some(xs) = self.held[k].take() {
            return Ok(xs);
        }
        let spill = self.spill.as_ref().expect("a batch not held is spilled");
        let (offset, shape, dtype, device) = &spill.slots[k];
        let mut bytes = vec![0u8; 4 * shape.iter().product::<usize>()];
        spill
            .file
            .read_exact_at(&mut bytes, *offset)
            .map_err(|e| Error::io(&spill.path, e))?;
        let xs = Tensor::from_raw_buffer(&bytes, DType::F32, shape, &Device::Cpu)?;
        Ok(xs.to_dtype(*dtype)?.to_device(device)?)
    }

    /// Stores batch `k`'s stream after a layer.
    pub fn put(&mut self, k: usize, xs: Tensor) -> Result<()> {
        let Some(spill) = &self.spill else {
            self.held[k] = Some(xs);
            return Ok(());
        };
        let values = xs.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        spill
            .file
            .write_all_at(&bytes, spill.slots[k].0)
            .map_err(|e| Error::io(&spill.path, e))
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spilled_batches_come_back_bit_for_bit_and_the_file_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("residuals");
        let mut r = Residuals::new(Some(&path)).unwrap();
        let a = Tensor::new(&[[[1.5f32, -0.0, f32::MIN_POSITIVE]]], &Device::Cpu).unwrap();
        let b = Tensor::new(&[[[3e38f32, 1e-45], [7.0, -2.25]]], &Device::Cpu).unwrap();
        r.push(a.clone()).unwrap();
        r.push(b.clone()).unwrap();
        assert!(path.exists());
        let bits = |t: &Tensor| -> Vec<u32> {
            let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        };
        assert_eq!(bits(&r.take(1).unwrap()), bits(&b));
        let doubled = (a.clone() * 2.0).unwrap();
        r.put(0, doubled.clone()).unwrap();
        assert_eq!(bits(&r.take(0).unwrap()), bits(&doubled));
        assert_eq!(bits(&r.take(1).unwrap()), bits(&b));
        drop(r);
        assert!(!path.exists(), "the scratch file is removed");
    }
}
