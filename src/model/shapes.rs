//! The input shapes a tower runs: a small set, declared when it loads (docs/design.md, "Shapes").
//!
//! On CUDA, ONNX Runtime pays once per session for every input shape it has not seen: cuDNN's
//! algorithm search for each convolution, and the arena's growth. A tower that runs any batch size
//! from 1 to 64, or any view a multiple of 32 px, sees hundreds of shapes and never gets fast, and
//! every new container pays again. So each tower declares its shapes at load: batch sizes in
//! [`Buckets`], and for OCR, its view and line-width buckets. A run is padded up to its bucket on
//! CUDA (the padding's outputs are dropped); on CPU, where padding would be work and a new shape
//! costs nothing, every batch size is declared and a run takes its own (splitting a run into
//! buckets, the other choice, costs more than it saves there); all run only declared shapes. [`Shapes`] counts what ran,
//! for /readyz, and what ran outside the set (a bug: the test workload asserts none). OCR's view
//! and width buckets are declared only with declared sizes (`CLIPFN_OCR_SIZES`, CUDA's); with
//! exact sizes its towers run any shape ([`Shapes::any`]).

use crate::settings::BatchPadding;
use std::{
    collections::{BTreeSet, HashSet},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

/// The batch sizes a tower runs: powers of `base` below its batch size, and the batch size; every
/// size up to the batch size where runs take their own size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    sizes: Vec<usize>,
    /// Pad a run up to its bucket (CUDA), split it into buckets, or run it at its own size (CPU);
    /// never `Auto` ([`ModelSettings::fill`](crate::settings::ModelSettings::fill)).
    fill: BatchPadding,
}

impl Buckets {
    /// Powers of two up to `max` (1, 2, 4, ... and `max` itself); `fill`: see [`Buckets::plan`].
    pub fn powers_of_two(max: usize, fill: BatchPadding) -> Self {
        Self::powers(max, 2, fill)
    }

    /// Powers of `base` up to `max`, and `max`; every size from 1 to `max` with `Exact`.
    pub fn powers(max: usize, base: usize, fill: BatchPadding) -> Self {
        let max = max.max(1);
        let sizes: Vec<usize> = match fill {
            BatchPadding::Exact => (1..=max).collect(),
            _ => {
                std::iter::successors(Some(1usize), |n| Some(n * base)).take_while(|&n| n < max).chain([max]).collect()
            }
        };
        Buckets { sizes, fill }
    }

    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    pub fn max(&self) -> usize {
        *self.sizes.last().expect("buckets hold at least 1")
    }

    /// The batch sizes to warm up: every bucket where a first run of a shape costs a search
    /// (`every`: on CUDA), else the smallest and the largest.
    pub fn warm_up_sizes(&self, every: bool) -> Vec<usize> {
        let mut sizes = if every { self.sizes.clone() } else { vec![1, self.max()] };
        sizes.dedup();
        sizes
    }

    /// How `n` inputs run: `(inputs, bucket)` for each run, in order: the fewest runs, each full but
    /// the last. Padded, that one is padded up to the smallest bucket that holds it; exact, it runs
    /// at its own size; split, it is split into runs of exactly a bucket, largest first.
    pub fn plan(&self, n: usize) -> Vec<(usize, usize)> {
        let (max, mut left, mut runs) = (self.max(), n, Vec::new());
        while left >= max {
            runs.push((max, max));
            left -= max;
        }
        if left == 0 {
            return runs;
        }
        match self.fill {
            BatchPadding::Pad => {
                let bucket =
                    *self.sizes.iter().find(|&&size| size >= left).expect("the last bucket holds any remainder");
                runs.push((left, bucket));
                return runs;
            }
            BatchPadding::Exact => {
                runs.push((left, left));
                return runs;
            }
            BatchPadding::Split | BatchPadding::Auto => {}
        }
        for &size in self.sizes.iter().rev() {
            while left >= size {
                runs.push((size, size));
                left -= size;
            }
        }
        runs
    }
}

/// What /readyz says of a tower's shapes: `allowed` is null for a tower that runs any shape
/// ([`Shapes::any`]).
#[derive(Debug, Default)]
pub struct ShapeCounts {
    /// No declared set: nothing runs outside it.
    open: bool,
    allowed: AtomicUsize,
    run: AtomicUsize,
    outside: AtomicUsize,
}

impl serde::Serialize for ShapeCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut counts = serializer.serialize_struct("ShapeCounts", 3)?;
        let allowed = (!self.open).then(|| self.allowed.load(Ordering::Relaxed));
        counts.serialize_field("allowed", &allowed)?;
        counts.serialize_field("run", &self.run.load(Ordering::Relaxed))?;
        counts.serialize_field("outside", &self.outside.load(Ordering::Relaxed))?;
        counts.end()
    }
}

/// A tower's declared input shapes and the ones it has run. The tower notes each run's shape;
/// only the worker thread does, and /readyz reads the counts.
#[derive(Debug)]
pub struct Shapes {
    declared: BTreeSet<Vec<i64>>,
    seen: HashSet<Vec<i64>>,
    counts: Arc<ShapeCounts>,
}

impl Shapes {
    pub fn new(declared: impl IntoIterator<Item = Vec<i64>>) -> Self {
        let declared: BTreeSet<Vec<i64>> = declared.into_iter().collect();
        let counts = ShapeCounts { allowed: declared.len().into(), ..ShapeCounts::default() };
        Shapes { declared, seen: HashSet::new(), counts: Arc::new(counts) }
    }

    /// No declared set: any shape may run (OCR's exact sizes, `CLIPFN_OCR_SIZES`), and none counts
    /// as outside; what ran is still counted.
    pub fn any() -> Self {
        let counts = ShapeCounts { open: true, ..ShapeCounts::default() };
        Shapes { declared: BTreeSet::new(), seen: HashSet::new(), counts: Arc::new(counts) }
    }

    /// Every batch bucket of `buckets` with the rest of the shape `tail`.
    pub fn batches(buckets: &Buckets, tail: &[i64]) -> Self {
        Self::new(buckets.sizes().iter().map(|&n| [&[n as i64][..], tail].concat()))
    }

    /// Notes a run of `shape`.
    pub fn ran(&mut self, shape: &[i64]) {
        if self.seen.contains(shape) {
            return;
        }
        self.seen.insert(shape.to_vec());
        self.counts.run.fetch_add(1, Ordering::Relaxed);
        if !self.counts.open && !self.declared.contains(shape) {
            tracing::warn!(?shape, "a tower ran a shape outside its declared set");
            self.counts.outside.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn counts(&self) -> Arc<ShapeCounts> {
        Arc::clone(&self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAD: BatchPadding = BatchPadding::Pad;
    const SPLIT: BatchPadding = BatchPadding::Split;
    const EXACT: BatchPadding = BatchPadding::Exact;

    #[test]
    fn buckets_are_powers_and_the_batch_size_or_every_size() {
        assert_eq!(Buckets::powers_of_two(64, PAD).sizes(), [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(Buckets::powers_of_two(48, SPLIT).sizes(), [1, 2, 4, 8, 16, 32, 48]);
        assert_eq!(Buckets::powers(32, 4, SPLIT).sizes(), [1, 4, 16, 32]);
        assert_eq!(Buckets::powers_of_two(1, PAD).sizes(), [1]);
        assert_eq!(Buckets::powers_of_two(8, EXACT).sizes(), [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn cuda_pads_the_last_run_and_cpu_runs_it_whole() {
        let cuda = Buckets::powers_of_two(64, PAD);
        assert_eq!(cuda.plan(5), [(5, 8)]);
        assert_eq!(cuda.plan(64), [(64, 64)]);
        assert_eq!(cuda.plan(130), [(64, 64), (64, 64), (2, 2)]);
        assert_eq!(cuda.plan(0), []);
        let cpu = Buckets::powers_of_two(8, EXACT);
        assert_eq!(cpu.plan(7), [(7, 7)]);
        assert_eq!(cpu.plan(19), [(8, 8), (8, 8), (3, 3)]);
        let split = Buckets::powers_of_two(8, SPLIT);
        assert_eq!(split.plan(7), [(4, 4), (2, 2), (1, 1)]);
        assert_eq!(split.plan(19), [(8, 8), (8, 8), (2, 2), (1, 1)]);
        // Every plan covers its inputs once, in runs of declared sizes.
        for buckets in [cuda, cpu, split, Buckets::powers(32, 4, SPLIT), Buckets::powers(20, 4, PAD)] {
            for n in 0..200 {
                let plan = buckets.plan(n);
                assert_eq!(plan.iter().map(|(inputs, _)| inputs).sum::<usize>(), n);
                assert!(plan.iter().all(|(inputs, size)| inputs <= size && buckets.sizes().contains(size)));
            }
        }
    }

    #[test]
    fn shapes_count_what_ran_and_what_ran_outside() {
        let mut shapes = Shapes::batches(&Buckets::powers_of_two(4, PAD), &[3, 8, 8]);
        shapes.ran(&[2, 3, 8, 8]);
        shapes.ran(&[2, 3, 8, 8]);
        shapes.ran(&[3, 3, 8, 8]);
        let counts = serde_json::to_value(&*shapes.counts()).unwrap();
        assert_eq!(counts, serde_json::json!({"allowed": 3, "run": 2, "outside": 1}));
        let mut any = Shapes::any();
        any.ran(&[2, 3, 8, 8]);
        any.ran(&[3, 3, 8, 8]);
        let counts = serde_json::to_value(&*any.counts()).unwrap();
        assert_eq!(counts, serde_json::json!({"allowed": null, "run": 2, "outside": 0}));
    }
}
