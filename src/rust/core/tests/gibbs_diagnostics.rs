//! The convergence diagnostics of a target run's checks on the device
//! (kernels/diagnostics.cu) equal the host's (gibbs::diagnostics), on a GPU
//! and on the CPU emulation of the kernel (tools/cuda-emu), for draws that
//! reach every branch of the definitions (common/diagnostic_cases.rs).

mod common;

use bulkem_core::exec::Monitor;
use bulkem_core::gibbs::diagnostics::{diagnose_array, Diagnostics};
use common::diagnostic_cases::{cases, disagreement};

fn host(case: &common::diagnostic_cases::Case) -> Diagnostics {
    diagnose_array(&case.draws, case.n, case.chains, true, &Monitor::default()).expect("host diagnostics")
}

#[test]
fn device_diagnostics_equal_the_hosts() {
    use bulkem_core::gibbs::gpu::diagnostics::{diagnose_array_on_device, Work};
    if !common::gpu_or_skip() {
        return;
    }
    for case in cases(true) {
        let want = host(&case);
        for work in [Work::Auto, Work::Global] {
            let got = diagnose_array_on_device(&case.draws, case.n, case.chains, work).expect("device diagnostics");
            if let Some(d) = disagreement(&want, &got) {
                panic!("{} ({work:?}): {d}", case.name);
            }
        }
    }
}

/// Runs the emulated kernel that tools/cuda-emu/run.sh builds (its path in
/// BULKEM_EMU_DIAGNOSTICS; skipped without it): each case written to a
/// file, its diagnostics read back.
#[test]
fn emulated_diagnostics_equal_the_hosts() {
    let Some(driver) = std::env::var_os("BULKEM_EMU_DIAGNOSTICS") else {
        eprintln!("skipped: BULKEM_EMU_DIAGNOSTICS is not set (tools/cuda-emu/run.sh sets it)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("bulkem-emu-diagnostics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    for (k, case) in cases(true).iter().enumerate() {
        let want = host(case);
        let params = case.draws.len() / (case.n * case.chains);
        for global in [0i64, 1] {
            let (input, output) = (dir.join(format!("in{k}_{global}")), dir.join(format!("out{k}_{global}")));
            let header = [case.n as i64, case.chains as i64, params as i64, global];
            let bytes: Vec<u8> = header.iter().flat_map(|h| h.to_le_bytes()).chain(case.draws.iter().flat_map(|x| x.to_le_bytes())).collect();
            std::fs::write(&input, bytes).expect("writing a case");
            let status = std::process::Command::new(&driver).arg(&input).arg(&output).status().expect("running the emulated kernel");
            assert!(status.success(), "{}: the emulated kernel failed", case.name);
            let out: Vec<f64> = std::fs::read(&output).expect("reading its diagnostics").chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
            assert_eq!(out.len(), 3 * params, "{}", case.name);
            let got = Diagnostics { rhat: out[..params].to_vec(), ess_bulk: out[params..2 * params].to_vec(), ess_tail: out[2 * params..].to_vec() };
            if let Some(d) = disagreement(&want, &got) {
                panic!("{} (global working memory: {}): {d}", case.name, global == 1);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
