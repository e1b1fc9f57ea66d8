//! The scale benchmark:
//! `cargo bench --bench scale -- [--pairs 100,1000,5000] [--buckets 200,1000] [--runs 3] [--pin] [--write]`.
//! `--pin` gives the emulator a CPU of its own in the pair and Bucket rows ([`pin_emulator`]).
//! `--buckets` runs Buckets alone, the workload of the quoted peer reference (empty: none).
//! `--budget N,N` also runs N pairs with the operator's default per-namespace write budget on
//! (the pair rows run with it off), as rows of their own: what a user applying N pairs in one
//! namespace waits.
//! `--runs` measures each N that many times (3 by default): its ratio is reported as the median
//! with the range, its other figures are the median run's. `--churn SECONDS[,BATCH]` also
//! creates and deletes BATCH pairs (default 50) over and over for that long and reports the
//! operator's RSS after every cycle (`--pairs '' --buckets ''` for it alone). `--fairness N`
//! measures a single Bucket's time to Ready in one namespace while another floods N Buckets.
//! `--accounts N` converges N pairs spread over three AWS accounts (the operator's own and two
//! it assumes a role in) and counts AssumeRole calls per account. `--drift` measures how long out-of-band changes wait for their correction with drift events
//! on and off, and what the drift-event queue costs an idle operator. `--sweep N` counts the
//! AWS calls of one orphan sweep with N live pairs.
//!
//! Each run is a child process with its own private control plane and emulator, so every run
//! starts from the same empty state. The report (rendered by `report`, as BENCHMARKS.md) goes
//! to stdout; `--write` writes BENCHMARKS.json and renders BENCHMARKS.md from it, keeping every
//! row and section this run did not measure, marked with the run that did. The body is
//! `tests/e2e/scale.rs`, which the e2e suite runs at a small N.

// The e2e suite's harness: the benchmark uses part of it.
#[path = "../tests/e2e/audit.rs"]
#[allow(dead_code)]
mod audit;
#[path = "../tests/e2e/drift_bench.rs"]
mod drift_bench;
mod report;
#[path = "../tests/e2e/scale.rs"]
mod scale;
#[path = "../tests/e2e/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;
mod workloads;

use std::process::{Command, Stdio};
use std::time::Duration;

use s3_operator::aws::budget;
use serde_json::{Value, json};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// With `--pin` (and at least 2 CPUs): the emulator gets the last CPU to itself and everything
/// else of this run (the API server, etcd, this process and the operator it starts) the others.
/// AWS never shares the operator's CPUs; an emulator that does is slowed by whatever runs beside
/// it, which is not the same in the floor's run and the operator's. Returns how it pinned.
fn pin_emulator() -> Option<String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return None;
    }
    let pids = scale::env_pids();
    assert!(!pids.is_empty(), "no pids in the environment's state");
    let own = (cpus - 1).to_string();
    let rest = match cpus - 2 {
        0 => "0".to_string(),
        last => format!("0-{last}"),
    };
    let mut pinned = Vec::new();
    for (name, pid) in pids {
        let cpu = if name == "moto" { &own } else { &rest };
        taskset(pid, cpu);
        pinned.push(format!("{name} on {cpu}"));
    }
    taskset(std::process::id(), &rest);
    pinned.push(format!("the rest on {rest}"));
    Some(pinned.join(", "))
}

/// Sets the CPUs of every thread of `pid`.
fn taskset(pid: u32, cpus: &str) {
    let status = Command::new("taskset")
        .args(["--all-tasks", "--cpu-list", "--pid", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset (util-linux)");
    assert!(status.success(), "taskset {cpus} {pid} failed");
}

/// A child's part: one measurement, printed as JSON lines. False when this is the parent.
fn child(args: &[String]) -> bool {
    if let Some(n) = arg(args, "--one") {
        let n: usize = n.parse().expect("--one N");
        let pinned = args
            .iter()
            .any(|a| a == "--pin")
            .then(pin_emulator)
            .flatten();
        if let Some(how) = &pinned {
            eprintln!("pinned: {how}");
        }
        let workload = match arg(args, "--workload").as_deref() {
            Some("buckets") => scale::Workload::Buckets,
            _ => scale::Workload::Pairs,
        };
        let budget = match arg(args, "--write-budget").as_deref() {
            // The operator's default: what a user applying them in one namespace waits.
            Some("default") => scale::Budget::On {
                rate: budget::DEFAULT_RATE,
                burst: budget::DEFAULT_BURST,
            },
            _ => scale::Budget::Off,
        };
        let mut row = runtime().block_on(scale::run(n, workload, budget, 30, false));
        row.emulator_pinned = pinned.is_some();
        println!("{}", serde_json::to_string(&row).expect("JSON"));
    } else if let Some(n) = arg(args, "--one-fairness") {
        let n: usize = n.parse().expect("--one-fairness N");
        let f = runtime().block_on(workloads::fairness(n, 5));
        println!("{}", serde_json::to_string(&f).expect("JSON"));
    } else if let Some(n) = arg(args, "--one-sweep") {
        let n: usize = n.parse().expect("--one-sweep N");
        let cost = runtime().block_on(workloads::sweep(n, 20));
        println!("{}", serde_json::to_string(&cost).expect("JSON"));
    } else if let Some(n) = arg(args, "--one-accounts") {
        let n: usize = n.parse().expect("--one-accounts N");
        let run = runtime().block_on(workloads::accounts(n));
        println!("{}", serde_json::to_string(&run).expect("JSON"));
    } else if args.iter().any(|a| a == "--one-drift") {
        let d = runtime().block_on(drift_bench::drift(5, "60s", Duration::from_secs(120)));
        println!("{}", serde_json::to_string(&d).expect("JSON"));
    } else if let Some(spec) = arg(args, "--one-churn") {
        let (secs, batch) = churn_spec(&spec);
        let duration = std::time::Duration::from_secs(secs);
        for s in runtime().block_on(workloads::churn(duration, batch)) {
            println!("{}", serde_json::to_string(&s).expect("JSON"));
        }
    } else {
        return false;
    }
    true
}

/// Runs this executable as a child with `args`; its stdout's JSON lines.
fn in_child(args: &[&str], what: &str) -> Vec<Value> {
    let out = Command::new(std::env::current_exe().expect("own path"))
        .args(args)
        .env_remove("S3OP_ENV_FILE")
        .stderr(Stdio::inherit())
        .output()
        .expect("run a child benchmark");
    assert!(out.status.success(), "{what} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Every N of `--pairs`, `--buckets` and `--budget`, each `runs` times: the median run by ratio,
/// with every run's ratio as `ratio_runs`.
fn measure_rows(args: &[String], runs: usize, measured: &Value) -> Vec<Value> {
    let pinned = args.iter().any(|a| a == "--pin");
    let sizes = |name: &str, default: &str| -> Vec<usize> {
        let list = arg(args, name).unwrap_or_else(|| default.into());
        list.split(',')
            .filter(|n| !n.trim().is_empty())
            .map(|n| n.trim().parse().expect("N,N,..."))
            .collect()
    };
    // (N, workload, write budget) as the child takes them.
    let of = |name, default, workload, budget| {
        sizes(name, default)
            .into_iter()
            .map(move |n| (n, workload, budget))
    };
    let sizes = of("--pairs", "100,1000,5000", "pairs", "off")
        .chain(of("--budget", "", "pairs", "default"))
        .chain(of("--buckets", "200,1000", "buckets", "off"));
    let mut rows = Vec::new();
    for (n, workload, budget) in sizes {
        let mut each: Vec<Value> = (0..runs)
            .map(|i| {
                let what = format!(
                    "run {} of {runs} at N = {n} {workload}, write budget {budget}",
                    i + 1
                );
                let n = n.to_string();
                let mut child = vec![
                    "--one",
                    &n,
                    "--workload",
                    workload,
                    "--write-budget",
                    budget,
                ];
                if pinned {
                    child.push("--pin");
                }
                let out = in_child(&child, &what);
                out.last().cloned().expect("a result line")
            })
            .collect();
        let ratios: Vec<f64> = each
            .iter()
            .map(|r| r["ratio"].as_f64().expect("ratio"))
            .collect();
        let (mid, _, _) = report::median(&ratios).expect("at least one run");
        let at = each
            .iter()
            .position(|r| r["ratio"].as_f64() == Some(mid))
            .expect("the median run");
        let mut row = each.swap_remove(at);
        row["ratio_runs"] = json!(ratios);
        row["measured"] = measured.clone();
        rows.push(row);
    }
    rows
}

/// This run's rows in place of the previous document's at the same N, workload and write
/// budget; the others kept, with the run that measured them.
fn merge_rows(previous: &Value, measured: Vec<Value>) -> Vec<Value> {
    let key = |r: &Value| {
        let workload = r["workload"].as_str().map(String::from);
        (workload, r["n"].as_u64(), budgeted(r))
    };
    let mut rows: Vec<Value> = previous["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|old| !measured.iter().any(|new| key(new) == key(old)))
        .cloned()
        .collect();
    rows.extend(measured);
    // Pairs, then pairs with the write budget, then Buckets, each by N.
    rows.sort_by_key(|r| (r["workload"] != "Pairs", budgeted(r), r["n"].as_u64()));
    rows
}

/// Whether a row ran with the write budget on.
fn budgeted(row: &Value) -> bool {
    !row["write_budget"].is_null()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if child(&args) {
        return;
    }
    let runs: usize = arg(&args, "--runs").map_or(3, |r| r.parse().expect("--runs N"));
    assert!(runs > 0, "--runs must be at least 1");
    let run = json!({"commit": commit(), "date": jiff::Timestamp::now().strftime("%F").to_string(),
        "machine": machine(), "args": shown_args(&args)});
    let measured = json!({"commit": run["commit"], "date": run["date"]});
    let with_run = |mut v: Value| {
        v["measured"] = measured.clone();
        v
    };
    let churn = arg(&args, "--churn").map(|spec| {
        let (secs, batch) = churn_spec(&spec);
        let samples = in_child(&["--one-churn", &spec], "the churn run");
        with_run(json!({"seconds": secs, "batch": batch, "samples": samples}))
    });
    let fairness = arg(&args, "--fairness").map(|n| {
        let out = in_child(&["--one-fairness", &n], "the fairness run");
        with_run(out.last().cloned().expect("a result line"))
    });
    let drift = args.iter().any(|a| a == "--drift").then(|| {
        let out = in_child(&["--one-drift"], "the drift run");
        with_run(out.last().cloned().expect("a result line"))
    });
    let sweep = arg(&args, "--sweep").map(|n| {
        let out = in_child(&["--one-sweep", &n], "the sweep run");
        with_run(out.last().cloned().expect("a result line"))
    });
    let accounts = arg(&args, "--accounts").map(|n| {
        let out = in_child(&["--one-accounts", &n], "the accounts run");
        with_run(out.last().cloned().expect("a result line"))
    });
    let rows = measure_rows(&args, runs, &measured);
    // What this run did not measure is kept from BENCHMARKS.json, with the run that did.
    let json_path = support::repo().join("BENCHMARKS.json");
    let previous: Value = std::fs::read_to_string(&json_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let doc = json!({
        "run": run,
        "rows": merge_rows(&previous, rows),
        "churn": churn.unwrap_or_else(|| previous["churn"].clone()),
        "fairness": fairness.unwrap_or_else(|| previous["fairness"].clone()),
        "drift": drift.unwrap_or_else(|| previous["drift"].clone()),
        "sweep": sweep.unwrap_or_else(|| previous["sweep"].clone()),
        "accounts": accounts.unwrap_or_else(|| previous["accounts"].clone()),
        "peer_reference": previous["peer_reference"],
    });
    let write = args.iter().any(|a| a == "--write");
    // The figures are saved before anything else can fail.
    if write {
        let text = serde_json::to_string_pretty(&doc).expect("JSON");
        std::fs::write(&json_path, text + "\n").expect("write BENCHMARKS.json");
        eprintln!("wrote {}", json_path.display());
    }
    let md = report::render(&doc).expect("a report of this run");
    println!("{md}");
    if write {
        let md_path = support::repo().join("BENCHMARKS.md");
        std::fs::write(&md_path, md).expect("write BENCHMARKS.md");
        eprintln!("wrote {}", md_path.display());
    }
}

/// The arguments as given, without the `--bench` cargo adds; an empty one shown as ''.
fn shown_args(args: &[String]) -> String {
    args.iter()
        .skip(1)
        .filter(|a| *a != "--bench")
        .map(|a| if a.is_empty() { "''" } else { a.as_str() })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `SECONDS[,BATCH]`, BATCH 50 by default.
fn churn_spec(spec: &str) -> (u64, usize) {
    let (secs, batch) = spec.split_once(',').unwrap_or((spec, "50"));
    let usage = "--churn SECONDS[,BATCH]";
    (secs.parse().expect(usage), batch.parse().expect(usage))
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores ({cpu})")
}
