//! The benchmark at a small N, as the e2e suite runs it: it asserts what every run must show
//! (everything Ready, the floor's AWS writes, a quiet resync, a clean audit), never speed; and
//! the tables the benchmark's rows print as.

use std::collections::BTreeMap;

use crate::scale::{Budget, Row, Workload, is_read, run};

/// The summary table, one column per run.
fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let head: Vec<String> = rows.iter().map(|r| format!("N = {}", r.n)).collect();
    out += &format!(
        "| | {} |\n|---|{}\n",
        head.join(" | "),
        "---|".repeat(rows.len())
    );
    let mut line = |name: &str, f: &dyn Fn(&Row) -> String| {
        let cells: Vec<String> = rows.iter().map(f).collect();
        out += &format!("| {name} | {} |\n", cells.join(" | "));
    };
    line("Floor: direct AWS calls (s)", &|r| {
        format!("{:.1}", r.floor_s)
    });
    line("Operator: apply to all Ready (s)", &|r| {
        format!("{:.1}", r.converge_s)
    });
    line(
        "Ratio operator / floor (target ≤ 1.1, at 5,000 ≤ 1.3)",
        &|r| format!("**{:.2}x**", r.ratio),
    );
    line("Applying the objects alone (s)", &|r| {
        format!("{:.1}", r.apply_s)
    });
    line("AWS calls per pair, operator", &|r| {
        format!("{:.2}", r.operator_calls.values().sum::<f64>())
    });
    line("AWS calls per pair, floor", &|r| {
        format!("{:.2}", r.floor_calls.values().sum::<f64>())
    });
    line("AWS errors and throttles, operator / floor", &|r| {
        format!("{} / {}", r.aws_failures, r.floor_failures)
    });
    line("Reconcile errors (retries)", &|r| {
        format!("{}", r.reconcile_errors)
    });
    line("API writes per pair", &|r| {
        format!("{:.2}", r.kube_writes.values().sum::<f64>())
    });
    line("Resync: AWS writes", &|r| {
        format!("{}", r.resync_aws_writes.abs())
    });
    line("Resync: API writes", &|r| {
        format!("{}", r.resync_kube_writes.abs())
    });
    line("Resync: S3 reads per pair (≤ 4)", &|r| {
        format!("{:.2}", r.resync_s3_reads_per_pair)
    });
    line("Resync: IAM reads per BucketAccess", &|r| {
        format!("{:.2}", r.resync_iam_reads_per_access)
    });
    line("Resync of every object (s)", &|r| {
        format!("{:.1}", r.resync_s)
    });
    line("Peak RSS (MiB)", &|r| format!("{:.1}", r.rss_peak_mib));
    line("Settled RSS after resync (MiB)", &|r| {
        format!("{:.1}", r.rss_settled_mib)
    });
    line("of which heap and stacks (MiB)", &|r| {
        format!("{:.1}", r.rss_anon_settled_mib)
    });
    line("CPU while converging (s)", &|r| {
        format!("{:.1}", r.cpu_converge_s)
    });
    line("CPU for startup + resync (s)", &|r| {
        format!("{:.1}", r.cpu_resync_s)
    });
    line("Startup: caches synced (s)", &|r| {
        format!("{:.2}", r.caches_synced_s)
    });
    line("Startup: first reconcile (s)", &|r| {
        format!("{:.2}", r.first_reconcile_s)
    });
    line("Single Bucket create→Ready p50 / p99 (s)", &|r| {
        format!("{:.3} / {:.3}", r.latency_p50_s, r.latency_p99_s)
    });
    line("… minus its AWS time p50 / p99 (s)", &|r| {
        format!(
            "{:.3} / {:.3}",
            r.latency_minus_aws_p50_s, r.latency_minus_aws_p99_s
        )
    });
    line("Audit problems", &|r| format!("{}", r.audit_problems.len()));
    out
}

/// Buckets-only rows in the columns of the quoted peer reference.
fn peer_rows(rows: &[Row], tool: &str) -> String {
    let mut out = String::new();
    for r in rows.iter().filter(|r| r.workload == Workload::Buckets) {
        let resync = r.resync_s3_reads_per_pair + r.resync_aws_writes.abs() / r.n as f64;
        out += &format!(
            "| {} | {tool} | {:.1} | {:.2}x | {:.2} / {:.2} | {:.2} | {:.1} | {:.1} |\n",
            r.n,
            r.converge_s,
            r.ratio,
            r.operator_calls.values().sum::<f64>(),
            resync,
            r.kube_writes.values().sum::<f64>(),
            r.rss_peak_mib,
            r.cpu_converge_s,
        );
    }
    out
}

/// Per-operation calls per pair, operator next to floor.
fn calls_table(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        let unit = r.workload.unit();
        out += &format!(
            "\nN = {} {unit}s:\n\n| operation | operator | floor |\n|---|---|---|\n",
            r.n
        );
        let ops: std::collections::BTreeSet<&String> = r
            .operator_calls
            .keys()
            .chain(r.floor_calls.keys())
            .collect();
        for op in ops {
            out += &format!(
                "| {op} | {:.2} | {:.2} |\n",
                r.operator_calls.get(op).copied().unwrap_or(0.0),
                r.floor_calls.get(op).copied().unwrap_or(0.0)
            );
        }
        out += &format!("\n| API write | per {unit} |\n|---|---|\n");
        for (k, v) in &r.kube_writes {
            out += &format!("| {k} | {v:.2} |\n");
        }
    }
    out
}

/// The writes of a run's operator that its floor made too: the operator makes no AWS write the
/// floor does not (no retries, nothing extra).
fn aws_writes(m: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    m.iter()
        .filter(|(k, _)| !is_read(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Checks what every workload's run must show, whatever the machine's speed. `writes`: the API
/// writes per object, finalizer patches aside, by `kind:verb`.
fn assert_correct(row: &Row, writes: &[(&str, f64)]) {
    eprintln!("{}", calls_table(std::slice::from_ref(row)));
    assert_eq!(
        aws_writes(&row.operator_calls),
        aws_writes(&row.floor_calls)
    );
    // The same failures as the floor: only the GetUser of each missing user. An attempt that got
    // no answer is resent by the SDK, and the resend may meet what the first attempt did (a
    // CreateUser answered EntityAlreadyExists): each unanswered attempt may explain one failure
    // more on its side, and no more.
    let extra = row.aws_failures - row.floor_failures;
    assert!(
        (-row.floor_unanswered..=row.aws_unanswered).contains(&extra),
        "failures: operator {} ({} unanswered), floor {} ({} unanswered)",
        row.aws_failures,
        row.aws_unanswered,
        row.floor_failures,
        row.floor_unanswered
    );
    assert_eq!(row.reconcile_errors, 0.0);
    assert_eq!(
        row.resync_writes_seen,
        Vec::<String>::new(),
        "a resync wrote"
    );
    assert_eq!(row.resync_aws_writes, 0.0, "a resync wrote to AWS");
    assert_eq!(row.resync_kube_writes, 0.0, "a resync wrote to Kubernetes");
    // Exactly the writes BENCHMARKS.md lists, for every object: one status (no flip while
    // converging, however late one kind's watch events come), one event, and the Secret. No
    // write is retried: a refused finalizer patch fails its pass before anything else is
    // written. Finalizer patches are left out: one sent from a cache that has not yet seen the
    // first is refused (409) and counted, which happens under load.
    let made: BTreeMap<&str, f64> = row
        .kube_writes
        .iter()
        .filter(|(k, _)| !k.ends_with(":patch"))
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        made,
        writes.iter().copied().collect::<BTreeMap<_, _>>(),
        "API writes per object, finalizer patches aside: {:?}",
        row.kube_writes
    );
    assert!(row.audit_problems.is_empty(), "{:?}", row.audit_problems);
    assert!(row.rss_peak_mib > 0.0 && row.latency_p50_s > 0.0);
    // The breakdown sees every part of a slot: AWS calls, API writes, and what remains.
    let b = &row.breakdown;
    assert!(
        b.aws_s > 0.0 && b.floor_aws_s > 0.0 && b.kube_writes_s > 0.0 && b.reconciles >= 1.0,
        "{b:?}"
    );
}

/// A pair's API writes, finalizer patches aside.
const PAIR_WRITES: [(&str, f64); 4] = [
    ("Bucket:patch_status", 1.0),
    ("BucketAccess:patch_status", 1.0),
    // One for each object.
    ("Event:publish", 2.0),
    ("Secret:apply", 1.0),
];

/// The floor counts the AWS calls of this test process: two floors at once would count each
/// other's.
static ONE_FLOOR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn benchmark_smoke_converges_matches_the_floor_and_resyncs_quietly() {
    let n = 8;
    let row = {
        let _floor = ONE_FLOOR.lock().await;
        run(n, Workload::Pairs, Budget::Off, 3, true).await
    };
    eprintln!("{}", table(std::slice::from_ref(&row)));
    assert_correct(&row, &PAIR_WRITES);
    // 4 for the Bucket: tagging, public access block, encryption, and the bucket policy (its
    // TLS-only statement is a security property whose drift must be seen). The BucketAccess
    // confirms from the bucket's tags in AWS, never from status, that its Bucket still owns the
    // bucket it grants: from the Bucket's own read (reconcile::tag_reads), so no read of its own.
    assert!(
        row.resync_s3_reads_per_pair <= 4.0,
        "{}",
        row.resync_s3_reads_per_pair
    );
}

#[tokio::test]
async fn benchmark_smoke_of_buckets_alone_matches_the_floor() {
    let row = {
        let _floor = ONE_FLOOR.lock().await;
        run(8, Workload::Buckets, Budget::Off, 2, true).await
    };
    eprintln!("{}", peer_rows(std::slice::from_ref(&row), "smoke"));
    assert_correct(
        &row,
        &[("Bucket:patch_status", 1.0), ("Event:publish", 1.0)],
    );
    // Versioning is managed here: its read joins the four of every Bucket.
    let reads = row.resync_s3_reads_per_pair;
    assert!(
        (5.0..=5.25).contains(&reads),
        "S3 reads per Bucket: {reads}"
    );
    assert_eq!(row.operator_calls.get("s3:PutBucketVersioning"), Some(&1.0));
}

/// The benchmark's `--budget` rows, with a budget small enough for a few pairs: the default's
/// burst (200 writes) covers 28 pairs of 7 writes, and as the budget refills while the operator
/// works, only about 60 pairs (half a minute of waiting) would be sure to spend it. The 8
/// Buckets' passes spend the burst of 10 and more, so the BucketAccesses' passes wait for the
/// budget; still every object converges with the floor's AWS writes, none retried, and a quiet
/// resync.
#[tokio::test]
async fn benchmark_smoke_with_a_write_budget_defers_past_its_burst() {
    let (n, budget) = (
        8,
        Budget::On {
            rate: 5.0,
            burst: 10,
        },
    );
    let mut row = {
        let _floor = ONE_FLOOR.lock().await;
        run(n, Workload::Pairs, budget, 3, true).await
    };
    eprintln!("{}", table(std::slice::from_ref(&row)));
    let spent = row.write_budget.clone().expect("the budget's figures");
    let writes: f64 = aws_writes(&row.operator_calls).values().sum();
    assert!(writes * n as f64 > f64::from(spent.burst), "{writes}");
    assert!(spent.deferrals > 0.0, "{spent:?}");
    // The budget's `WriteBudgetExhausted` events come on top of each object's one.
    let events = row.kube_writes.get("Event:publish").copied().unwrap_or(0.0);
    assert!(events >= 2.0, "{:?}", row.kube_writes);
    row.kube_writes.insert("Event:publish".into(), 2.0);
    assert_correct(&row, &PAIR_WRITES);
}
