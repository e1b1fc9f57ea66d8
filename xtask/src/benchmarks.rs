//! BENCHMARKS.md as the rendering of BENCHMARKS.json (the renderer is the benchmark's own), so
//! no figure in it can come from anywhere else.

use std::path::Path;

use crate::{Error, Generated, read, shape};

#[path = "../../benches/report/mod.rs"]
mod report;

const JSON: &str = "BENCHMARKS.json";

pub fn file(root: &Path) -> Result<Generated, Error> {
    let doc: serde_json::Value =
        serde_json::from_str(&read(root, JSON)?).map_err(|source| Error::Json {
            path: JSON.into(),
            source,
        })?;
    Ok(Generated {
        path: "BENCHMARKS.md".into(),
        text: report::render(&doc).map_err(|what| shape(JSON, what))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(n: u32, workload: &str, ratio: f64, runs: &[f64], commit: &str) -> serde_json::Value {
        json!({"n": n, "workload": workload, "concurrency": 10, "ratio": ratio, "ratio_runs": runs,
            "measured": {"commit": commit, "date": "2026-11-26"},
            "floor_s": 1.0, "converge_s": 1.1, "apply_s": 0.1, "aws_failures": 0.0,
            "floor_failures": 0.0, "reconcile_errors": 0.0, "resync_aws_writes": -0.0,
            "resync_kube_writes": 0.0, "resync_s3_reads_per_pair": 4.0,
            "resync_iam_reads_per_access": 3.0, "resync_s": 1.0, "rss_peak_mib": 20.0,
            "rss_settled_mib": 20.0, "rss_anon_settled_mib": 5.0, "cpu_converge_s": 1.0,
            "cpu_resync_s": 1.0, "caches_synced_s": 0.2, "first_reconcile_s": 0.4,
            "latency_p50_s": 0.04, "latency_p99_s": 0.05, "latency_minus_aws_p50_s": 0.01,
            "latency_minus_aws_p99_s": 0.02, "audit_problems": [],
            "operator_calls": {"s3:CreateBucket": 1.0}, "floor_calls": {"s3:CreateBucket": 1.0},
            "kube_writes": {"Bucket:patch": 1.0}})
    }

    fn doc(rows: Vec<serde_json::Value>) -> serde_json::Value {
        json!({"run": {"commit": "abc1234", "date": "2026-11-26", "machine": "2 cores",
                "args": "--pairs 100 --write"},
            "rows": rows,
            "peer_reference": {"source": "issue 16 (2026-11)", "note": "Quoted peers.",
                "rows": [["200", "ACK", "41.4", "8.9x", "49 / 43", "3", "63.6", "8.7"]]}})
    }

    /// Ratios are medians with their range; what the run did not measure is marked quoted with
    /// its date and commit; quoted peer rows name their source.
    #[test]
    fn ratios_are_medians_and_kept_rows_are_quoted() {
        let md = report::render(&doc(vec![
            row(100, "Pairs", 1.05, &[1.20, 1.05, 0.98], "abc1234"),
            row(1000, "Pairs", 1.3, &[], "0ld0000-dirty"),
            row(200, "Buckets", 1.01, &[1.01, 1.03, 0.99], "abc1234"),
        ]))
        .unwrap();
        let ratio_line = md.lines().find(|l| l.starts_with("| Ratio")).unwrap();
        assert!(
            ratio_line.contains("**1.05x (0.98–1.20, 3 runs)**"),
            "{ratio_line}"
        );
        assert!(ratio_line.contains("**1.30x (1 run)**"), "{ratio_line}");
        let measured = md.lines().find(|l| l.starts_with("| Measured")).unwrap();
        assert_eq!(
            measured,
            "| Measured | measured by this run | quoted: measured 2026-11-26 at `0ld0000-dirty` |"
        );
        assert!(md.contains(
            "| 200 | this operator, measured by this run | 1.1 | 1.01x (0.99–1.03, 3 runs) |"
        ));
        assert!(md.contains("| 200 | ACK, quoted: issue 16 (2026-11) | 41.4 | 8.9x |"));
        assert!(md.contains("**Quoted** marks"));
        assert!(
            md.contains("\nN = 1000 pairs (quoted: measured 2026-11-26 at `0ld0000-dirty`):\n")
        );
        // A -0 write count (a difference of counters) reads 0.
        assert!(md.contains("| Resync: AWS writes | 0 | 0 |"));
    }

    /// Rows run with the write budget are a table of their own, beside the pair rows and not
    /// in them, with the budget's arithmetic: (N × writes per pair − burst) / rate.
    #[test]
    fn budgeted_rows_are_reported_beside_the_pair_rows_with_the_budgets_time() {
        let calls = json!({"s3:CreateBucket": 2.0, "s3:PutBucketPolicy": 2.0,
            "iam:CreateUser": 4.0, "s3:GetBucketTagging": 3.0});
        let mut off = row(1000, "Pairs", 1.3, &[], "abc1234");
        off["operator_calls"] = calls.clone();
        let mut on = row(200, "Pairs", 140.0, &[], "abc1234");
        on["operator_calls"] = calls;
        on["converge_s"] = json!(143.5);
        on["write_budget"] = json!({"rate": 10.0, "burst": 200, "deferrals": 1234.0});
        let md = report::render(&doc(vec![off, on])).unwrap();
        let pairs = md.lines().find(|l| l.starts_with("| Measured")).unwrap();
        assert_eq!(pairs.matches("measured by this run").count(), 1, "{pairs}");
        assert!(md.contains("\n## With the default write budget\n"), "{md}");
        let line = |start: &str| md.lines().find(|l| l.starts_with(start)).unwrap();
        assert_eq!(
            line("| AWS writes per pair |"),
            "| AWS writes per pair | 8.00 |"
        );
        assert_eq!(
            line("| Passes deferred"),
            "| Passes deferred by the budget | 1234 |"
        );
        assert_eq!(
            line("| The budget's time"),
            "| The budget's time: (N × writes per pair − burst) / rate (s) | 140.0 |"
        );
        assert_eq!(
            line("| Apply to all Ready beyond"),
            "| Apply to all Ready beyond the budget's time (s) | 3.5 |"
        );
        assert!(
            md.contains("| 200 | 8.00 | — | 140.0 (2.3 min) | 143.5 |"),
            "{md}"
        );
        assert!(
            md.contains("| 1000 | 8.00 | 1.1 | 780.0 (13.0 min) | — |"),
            "{md}"
        );
        assert!(
            md.contains("\nN = 200 pairs with the default write budget (measured by this run):\n")
        );
    }

    #[test]
    fn median_is_a_real_run() {
        assert_eq!(report::median(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(report::median(&[2.0, 1.0]), Some((1.0, 1.0, 2.0)));
        assert_eq!(report::median(&[]), None);
    }

    /// A figure changed in BENCHMARKS.md by hand, or in BENCHMARKS.json without rendering, is
    /// drift that `cargo xtask check` reports.
    #[test]
    fn an_edited_figure_is_drift() {
        let root = crate::repo();
        let committed = read(&root, "BENCHMARKS.md").unwrap();
        let rendered = file(&root).unwrap().text;
        assert_eq!(committed, rendered, "run `cargo xtask generate`");
        let tmp = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::copy(root.join(JSON), tmp.join(JSON)).unwrap();
        assert_eq!(file(&tmp).unwrap().text, rendered);
        let mut json: serde_json::Value =
            serde_json::from_str(&read(&root, JSON).unwrap()).unwrap();
        json["rows"][0]["floor_s"] = json!(1234.5);
        std::fs::write(tmp.join(JSON), json.to_string()).unwrap();
        let again = file(&tmp).unwrap().text;
        std::fs::remove_dir_all(&tmp).unwrap();
        assert!(again.contains("| 1234.5 |") && again != rendered);
    }
}
