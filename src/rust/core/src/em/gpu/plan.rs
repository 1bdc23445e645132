//! Splitting a device's pairs into launches that fit its memory and time.

use std::ops::Range;

use crate::error::Result;
use crate::gpu::Device;

use super::super::config::CheckedEmConfig;
use super::pairs::Pairs;
use super::{Path, LAUNCH_WORK, MEMORY_SHARE};

/// Consecutive ranges of pairs, each small enough for one launch and of
/// one model: the launch plan of every candidate number of components.
pub(super) fn plan_launches(dev: &Device, data: &[&[f64]], pairs: &Pairs, configs: &[CheckedEmConfig], path: Path, trace: bool) -> Result<Vec<Range<usize>>> {
    if pairs.len() == 0 {
        return Ok(vec![]);
    }
    let budget = dev.free_memory()? as f64 * MEMORY_SHARE;
    Ok(plan_ranges(data, pairs, configs, path, trace, budget))
}

/// [`plan_launches`] for a memory budget in bytes: a launch holds its
/// pairs' datasets, starts, results and traces within `budget` (a single
/// pair always makes a launch), at most LAUNCH_WORK observation-iterations on
/// the shared-memory path and 65,535 pairs (the grid's y limit) on the other.
pub(super) fn plan_ranges(data: &[&[f64]], pairs: &Pairs, configs: &[CheckedEmConfig], path: Path, trace: bool, budget: f64) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes, mut work) = (0usize, 0f64, 0f64);
    for i in 0..pairs.len() {
        let config = &configs[pairs.model[i]];
        let trace_len = if trace { config.max_iters } else { 0 };
        let per_pair = (8 * (3 * config.components + 8 + trace_len)) as f64;
        let n = data[pairs.dataset[i]].len() as f64;
        let add_work = n * config.max_iters as f64;
        // A pair brings its dataset along when it is the first of it in a launch.
        let bytes_of = |start: usize| per_pair + if i == start || pairs.dataset[i - 1] != pairs.dataset[i] { 8.0 * n } else { 0.0 };
        let full = i > start
            && (pairs.model[i] != pairs.model[start]
                || bytes + bytes_of(start) > budget
                || (path == Path::Warp && work + add_work > LAUNCH_WORK)
                || (path == Path::Grid && i - start >= 65_535));
        if full {
            ranges.push(start..i);
            start = i;
            bytes = 0.0;
            work = 0.0;
        }
        bytes += bytes_of(start);
        work += add_work;
    }
    ranges.push(start..pairs.len());
    ranges
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::em::{EmConfig, Family};

    #[test]
    fn launches_cover_every_pair_within_the_memory_budget() {
        let data: Vec<Vec<f64>> = (0..50).map(|d| vec![1.0; 100 + 37 * d]).collect();
        let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
        let config = EmConfig::new(Family::InvGauss, 2).random_inits(7).max_iters(30).check().unwrap();
        let mut pairs = Pairs::default();
        (0..50).for_each(|d| (0..7).for_each(|s| pairs.push(0, d, s)));
        for budget in [1.0, 20_000.0, 100_000.0, 1e12] {
            let ranges = plan_ranges(&refs, &pairs, std::slice::from_ref(&config), Path::Warp, true, budget);
            assert_eq!(ranges.first().map(|r| r.start), Some(0));
            assert_eq!(ranges.last().map(|r| r.end), Some(pairs.len()));
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start && !w[0].is_empty()));
            for r in &ranges {
                let mut datasets: Vec<usize> = pairs.dataset[r.clone()].to_vec();
                datasets.dedup();
                let bytes: usize = datasets.iter().map(|&d| 8 * data[d].len()).sum::<usize>() + r.len() * 8 * (6 + 8 + 30);
                assert!(bytes as f64 <= budget || r.len() == 1, "budget {budget}: {} bytes in {r:?}", bytes);
            }
            if budget == 1e12 {
                assert_eq!(ranges.len(), 1);
            }
        }
    }

    #[test]
    fn a_launch_holds_one_model() {
        let data: Vec<Vec<f64>> = (0..10).map(|_| vec![1.0; 100]).collect();
        let refs: Vec<&[f64]> = data.iter().map(|d| &d[..]).collect();
        let base = EmConfig::new(Family::Normal, 1).random_inits(3);
        let configs: Vec<_> = (1..=3).map(|k| base.with_components(k).check().unwrap()).collect();
        let mut pairs = Pairs::default();
        (0..3).for_each(|k| (0..10).for_each(|d| (0..3).for_each(|s| pairs.push(k, d, s))));
        let ranges = plan_ranges(&refs, &pairs, &configs, Path::Warp, false, 1e12);
        assert_eq!(ranges, vec![0..30, 30..60, 60..90]);
    }
}

