//! The scale benchmark: `cargo bench --bench scale -- [--pairs 100,1000,5000] [--write]`.
//! `--churn SECONDS[,BATCH]` instead creates and deletes BATCH pairs (default 50) over and over
//! for that long and prints the operator's RSS after every cycle (as JSON lines too).
//!
//! Each N runs in a child process with its own private control plane and emulator, so every run
//! starts from the same empty state. The summary table goes to stdout; `--write` also writes
//! BENCHMARKS.md. The body is `tests/e2e/scale.rs`, which the e2e suite runs at a small N.

#[path = "../tests/e2e/audit.rs"]
mod audit;
#[path = "../tests/e2e/scale.rs"]
mod scale;
#[path = "../tests/e2e/support.rs"]
mod support;

use std::fmt::Write as _;
use std::process::{Command, Stdio};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(n) = arg(&args, "--one") {
        let n: usize = n.parse().expect("--one N");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let row = rt.block_on(scale::run(n, 30, false));
        println!("{}", serde_json::to_string(&row).expect("JSON"));
        return;
    }
    if let Some(spec) = arg(&args, "--churn") {
        let (secs, batch) = spec.split_once(',').unwrap_or((&spec, "50"));
        let secs: u64 = secs.parse().expect("--churn SECONDS[,BATCH]");
        let batch: usize = batch.parse().expect("--churn SECONDS[,BATCH]");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let samples = rt.block_on(scale::churn(std::time::Duration::from_secs(secs), batch));
        println!("| cycle | after (s) | RSS (MiB) |\n|---|---|---|");
        for s in &samples {
            println!("| {} | {:.0} | {:.1} |", s.cycle, s.elapsed_s, s.rss_mib);
        }
        for s in &samples {
            println!("{}", serde_json::to_string(s).expect("JSON"));
        }
        return;
    }
    let pairs: Vec<usize> = arg(&args, "--pairs")
        .unwrap_or_else(|| "100,1000,5000".into())
        .split(',')
        .map(|n| n.trim().parse().expect("--pairs N,N,..."))
        .collect();
    let exe = std::env::current_exe().expect("own path");
    let mut rows = Vec::new();
    for n in pairs {
        let out = Command::new(&exe)
            .args(["--one", &n.to_string()])
            .env_remove("S3OP_ENV_FILE")
            .stderr(Stdio::inherit())
            .output()
            .expect("run one benchmark");
        assert!(out.status.success(), "the run at N = {n} failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().expect("a result line");
        rows.push(serde_json::from_str::<scale::Row>(last).expect("result JSON"));
    }
    let table = scale::table(&rows);
    println!("{table}");
    if args.iter().any(|a| a == "--write") {
        let path = support::repo().join("BENCHMARKS.md");
        std::fs::write(&path, report(&rows)).expect("write BENCHMARKS.md");
        eprintln!("wrote {}", path.display());
    }
}

fn report(rows: &[scale::Row]) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let commit = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into());
    let mut out = String::new();
    let _ = write!(
        out,
        "# Benchmarks\n\n\
         Written by `cargo bench --bench scale -- --write` (see `benches/scale.rs`); do not edit by hand.\n\n\
         Commit measured: `{commit}`.\n\
         Machine: {cores} cores ({cpu}); kube-apiserver, etcd and moto run on the same cores as the operator.\n\
         Each N starts from an empty control plane and emulator. The floor makes the same AWS calls \
         directly (the operator's own AWS client code, credentials and policy, {c} at a time per kind) \
         with no Kubernetes in the way; the operator runs with `--max-concurrent-reconciles {c}`.\n\n",
        c = rows.first().map_or(0, |r| r.concurrency),
    );
    out += &scale::table(rows);
    out += "\n## Targets\n\n";
    for r in rows {
        let rss_target = match r.n {
            n if n <= 1000 => Some(40.0),
            n if n <= 5000 => Some(120.0),
            _ => None,
        };
        let _ = writeln!(
            out,
            "- N = {}: ratio {:.2}x ({}); resync writes AWS {} / API {} ({}); S3 reads per pair {:.2} ({}); peak RSS {:.1} MiB{}; audit {}.",
            r.n,
            r.ratio,
            if r.ratio <= 1.2 {
                "met"
            } else {
                "missed, target 1.2x"
            },
            r.resync_aws_writes.abs(),
            r.resync_kube_writes.abs(),
            if r.resync_aws_writes + r.resync_kube_writes == 0.0 {
                "met"
            } else {
                "missed"
            },
            r.resync_s3_reads_per_pair,
            if r.resync_s3_reads_per_pair <= 5.0 {
                "met"
            } else {
                "missed"
            },
            r.rss_peak_mib,
            rss_target.map_or(String::new(), |t| format!(
                " ({} {t} MiB)",
                if r.rss_peak_mib < t {
                    "met, under"
                } else {
                    "missed, target under"
                }
            )),
            if r.audit_problems.is_empty() {
                "clean".to_string()
            } else {
                format!("{} problems", r.audit_problems.len())
            },
        );
    }
    out += "\n## Calls per pair while converging\n";
    out += &scale::calls_table(rows);
    out
}
