//! Ctrl-C in the Gibbs sampler, in a test binary of its own: the CPU
//! thread pool is the process's, and beside other tests running at the same
//! time a worker waiting for its own tasks may take up another test's
//! whole chain (with a monitor nobody cancels) and finish it first, which
//! an R session, running one call at a time, never sees.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bulkem_core::error::ErrorKind;
use bulkem_core::exec::{Exec, Monitor};
use bulkem_core::gibbs::slice::SliceSettings;
use bulkem_core::gibbs::sweep::Sweeper;
use bulkem_core::gibbs::{sample, Family, HbData, HbglmConfig, Prior, NEWTON_TAU_ROWS};

#[test]
fn a_cancelled_sweep_stops_at_once_and_a_cancelled_run_within_a_second() {
    // Two groups of a million rows: one sweep takes about a second on two
    // cores, so the monitor must be seen inside it.
    let n = 2_000_000;
    let x: Vec<f64> = (0..n).flat_map(|i| [1.0, ((i * 37) % 101) as f64 / 50.0 - 1.0, ((i * 13) % 7) as f64 / 3.0 - 1.0]).collect();
    let y: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13 < 6) as u8 as f64).collect();
    let data = HbData::new(y, x, vec![], &[n / 2, n / 2], 3, 0).unwrap();
    // A sweep that finds the monitor cancelled updates nothing.
    let prior = Prior::default();
    let sw = Sweeper { data: &data, family: Family::Binomial, prior: &prior, slice: SliceSettings::new(1.0), seed: 1, chain: 0, balance: true, newton_tau_rows: NEWTON_TAU_ROWS };
    let mut state = sw.init(1.0);
    let before = state.beta.clone();
    let cancelled = Monitor::new();
    cancelled.cancel();
    assert_eq!(sw.sweep_watched(&mut state, 0, false, &cancelled).unwrap_err().kind(), ErrorKind::Interrupt);
    assert_eq!(state.beta, before);
    // A run cancelled mid-sweep returns within a second (R's Ctrl-C
    // budget).
    let monitor = Arc::new(Monitor::new());
    let exec = Exec::cpu().with_monitor(monitor.clone());
    let config = HbglmConfig { iter: 1_000_000, warmup: 10, chains: 2, ..HbglmConfig::new(Family::Binomial) };
    let canceller = {
        let m = monitor.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            m.cancel();
            Instant::now()
        })
    };
    let err = sample(&data, &config, &exec).unwrap_err();
    let stopped = Instant::now();
    let cancelled_at = canceller.join().unwrap();
    assert_eq!(err.kind(), ErrorKind::Interrupt);
    let lag = stopped.saturating_duration_since(cancelled_at);
    assert!(lag < Duration::from_secs(1), "stopped {lag:?} after the cancel");
}
