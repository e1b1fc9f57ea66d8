//! BENCHMARKS.md, rendered from BENCHMARKS.json and nothing else: the benchmark's `--write`
//! renders it after writing the JSON, and `cargo xtask check` renders it again and fails when
//! the committed file differs. Shared by path between the benchmark and the xtask, so it needs
//! only serde_json.
//!
//! A row or section carries `measured: {commit, date}`; it is *quoted* when that is not the
//! `run` that wrote the file (the benchmark keeps what it did not re-measure).

use std::fmt::Write as _;

use serde_json::Value;

pub type Result<T> = std::result::Result<T, String>;

fn num(v: &Value, key: &str) -> Result<f64> {
    v[key]
        .as_f64()
        .ok_or_else(|| format!("BENCHMARKS.json: `{key}` is not a number"))
}

fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str> {
    v[key]
        .as_str()
        .ok_or_else(|| format!("BENCHMARKS.json: `{key}` is not a string"))
}

/// The sum of a `{name: count}` map's counts.
fn total(v: &Value, key: &str) -> f64 {
    v[key]
        .as_object()
        .map_or(0.0, |m| m.values().filter_map(Value::as_f64).sum())
}

/// "measured by this run" or "quoted: measured <date> at `<commit>`".
pub fn provenance(doc: &Value, item: &Value) -> Result<String> {
    let m = &item["measured"];
    let (commit, date) = (text(m, "commit")?, text(m, "date")?);
    let run = &doc["run"];
    Ok(
        if run["commit"].as_str() == Some(commit) && run["date"].as_str() == Some(date) {
            "measured by this run".into()
        } else {
            format!("quoted: measured {date} at `{commit}`")
        },
    )
}

/// The median (the lower middle run for an even count, so always a real run) and the spread.
pub fn median(runs: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted = runs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = *sorted.get((sorted.len().max(1) - 1) / 2)?;
    Some((mid, sorted[0], sorted[sorted.len() - 1]))
}

/// A row's ratio: the median of its runs with their range, or its one run.
fn ratio(row: &Value) -> Result<String> {
    let runs: Vec<f64> = row["ratio_runs"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    Ok(match median(&runs) {
        Some((mid, lo, hi)) if runs.len() > 1 => {
            format!("{mid:.2}x ({lo:.2}–{hi:.2}, {} runs)", runs.len())
        }
        _ => format!("{:.2}x (1 run)", num(row, "ratio")?),
    })
}

/// How one cell of the pairs table reads a row.
enum Cell {
    Num(&'static str, usize),
    /// Two numbers, "a / b".
    Two(&'static str, &'static str, usize),
    /// The sum of a map's counts.
    Sum(&'static str),
    Count(&'static str),
    Ratio,
    Provenance,
    /// Whether the emulator had a CPU of its own ("no" in rows measured before it could).
    Pinned,
    /// Two numbers, "a / b", or "not measured" in rows measured before they were.
    Since(&'static str, &'static str, usize),
}

/// The pairs table, one line each.
const PAIR_LINES: &[(&str, Cell)] = &[
    ("Measured", Cell::Provenance),
    ("Emulator on a CPU of its own (`--pin`)", Cell::Pinned),
    ("Floor: direct AWS calls (s)", Cell::Num("floor_s", 1)),
    (
        "Operator: apply to all Ready (s)",
        Cell::Num("converge_s", 1),
    ),
    (
        "Ratio operator / floor, median (min–max) (target ≤ 1.1, at 5,000 ≤ 1.3)",
        Cell::Ratio,
    ),
    ("Applying the objects alone (s)", Cell::Num("apply_s", 1)),
    ("AWS calls per pair, operator", Cell::Sum("operator_calls")),
    ("AWS calls per pair, floor", Cell::Sum("floor_calls")),
    (
        "AWS errors and throttles, operator / floor",
        Cell::Two("aws_failures", "floor_failures", 0),
    ),
    (
        "Reconcile errors (retries)",
        Cell::Num("reconcile_errors", 0),
    ),
    ("API writes per pair", Cell::Sum("kube_writes")),
    ("Resync: AWS writes", Cell::Num("resync_aws_writes", 0)),
    ("Resync: API writes", Cell::Num("resync_kube_writes", 0)),
    (
        "Resync: S3 reads per pair (≤ 4)",
        Cell::Num("resync_s3_reads_per_pair", 2),
    ),
    (
        "Resync: IAM reads per BucketAccess",
        Cell::Num("resync_iam_reads_per_access", 2),
    ),
    ("Resync of every object (s)", Cell::Num("resync_s", 1)),
    ("Peak RSS (MiB)", Cell::Num("rss_peak_mib", 1)),
    (
        "Settled RSS after resync (MiB)",
        Cell::Num("rss_settled_mib", 1),
    ),
    (
        "of which heap and stacks (MiB)",
        Cell::Num("rss_anon_settled_mib", 1),
    ),
    ("CPU while converging (s)", Cell::Num("cpu_converge_s", 1)),
    ("CPU for startup + resync (s)", Cell::Num("cpu_resync_s", 1)),
    (
        "Startup: caches synced (s)",
        Cell::Num("caches_synced_s", 2),
    ),
    (
        "Startup: first reconcile (s)",
        Cell::Num("first_reconcile_s", 2),
    ),
    (
        "Single Bucket create→Ready p50 / p99 (s)",
        Cell::Two("latency_p50_s", "latency_p99_s", 3),
    ),
    (
        "… minus its AWS time p50 / p99 (s)",
        Cell::Two("latency_minus_aws_p50_s", "latency_minus_aws_p99_s", 3),
    ),
    (
        "Emulator busy, floor / operator converging (CPU s per s; 1 is all moto can use)",
        Cell::Since("emulator_busy_floor", "emulator_busy_converge", 2),
    ),
    (
        "Control plane (API server, etcd, controller manager) / operator busy converging (CPU s per s)",
        Cell::Since("control_plane_busy_converge", "operator_busy_converge", 2),
    ),
    ("Audit problems", Cell::Count("audit_problems")),
];

impl Cell {
    fn read(&self, doc: &Value, row: &Value) -> Result<String> {
        Ok(match *self {
            // Counts of writes may come out as -0 from a difference of counters.
            Cell::Num(key, p) => format!("{:.p$}", num(row, key)?.abs()),
            Cell::Two(a, b, p) => format!("{:.p$} / {:.p$}", num(row, a)?, num(row, b)?),
            Cell::Sum(key) => format!("{:.2}", total(row, key)),
            Cell::Count(key) => row[key].as_array().map_or(0, Vec::len).to_string(),
            Cell::Ratio => format!("**{}**", ratio(row)?),
            Cell::Provenance => provenance(doc, row)?,
            Cell::Pinned => match row["emulator_pinned"].as_bool() {
                Some(true) => "yes".into(),
                _ => "no".into(),
            },
            Cell::Since(a, b, p) => match (row[a].as_f64(), row[b].as_f64()) {
                (Some(a), Some(b)) => format!("{a:.p$} / {b:.p$}"),
                _ => "not measured".into(),
            },
        })
    }
}

/// The rows of `workload` with the write budget off.
fn rows_of<'a>(doc: &'a Value, workload: &'a str) -> impl Iterator<Item = &'a Value> {
    doc["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(move |r| r["workload"] == workload && !budgeted(r))
}

/// Whether a row ran with the operator's default write budget on (`--budget`).
fn budgeted(row: &Value) -> bool {
    !row["write_budget"].is_null()
}

/// How a table line reads a row.
type Line<'a> = (String, Box<dyn Fn(&Value) -> Result<String> + 'a>);

/// The lines of the pairs table.
fn pair_lines(doc: &Value) -> Vec<Line<'_>> {
    PAIR_LINES
        .iter()
        .map(|(label, cell)| -> Line { (label.to_string(), Box::new(move |r| cell.read(doc, r))) })
        .collect()
}

/// A table of one column per row.
fn columns(rows: &[&Value], lines: &[Line]) -> Result<String> {
    let mut out = String::from("| |");
    for r in rows {
        let _ = write!(out, " N = {} |", num(r, "n")?);
    }
    out += &format!("\n|---|{}\n", "---|".repeat(rows.len()));
    for (label, read) in lines {
        out += &format!("| {label} |");
        for r in rows {
            let _ = write!(out, " {} |", read(r)?);
        }
        out.push('\n');
    }
    Ok(out)
}

/// The summary table of the pair rows, one column per N.
fn pairs_table(doc: &Value) -> Result<String> {
    let rows: Vec<&Value> = rows_of(doc, "Pairs").collect();
    columns(&rows, &pair_lines(doc))
}

/// AWS writes per unit of a row while converging: every call but a read (as the operator's
/// budget counts them, `aws::budget::is_write`).
fn aws_writes(row: &Value) -> f64 {
    let is_read = |call: &str| {
        let op = call.split(':').nth(1).unwrap_or(call);
        ["Get", "List", "Head", "Describe"]
            .iter()
            .any(|read| op.starts_with(read))
    };
    row["operator_calls"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(call, _)| !is_read(call))
        .filter_map(|(_, n)| n.as_f64())
        .sum()
}

/// A write budget's rate and burst.
fn rate_burst(budget: &Value) -> Result<(f64, f64)> {
    Ok((num(budget, "rate")?, num(budget, "burst")?))
}

/// The least time `n` pairs of `writes` AWS writes each take under a budget of `rate` writes a
/// second and `burst` at once, however fast the operator: what is past the burst, at the rate.
fn budget_time(n: f64, writes: f64, (rate, burst): (f64, f64)) -> f64 {
    ((n * writes - burst) / rate).max(0.0)
}

/// The same N's row of the pair rows (the budget off), if there is one.
fn unbudgeted<'a>(doc: &'a Value, row: &Value) -> Option<&'a Value> {
    rows_of(doc, "Pairs").find(|r| r["n"] == row["n"])
}

/// The pair rows run with the operator's default write budget, beside the pair rows; what a
/// user applying N pairs in one namespace waits, and why the default is what it is.
fn budget(doc: &Value) -> Result<String> {
    let rows: Vec<&Value> = doc["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["workload"] == "Pairs" && budgeted(r))
        .collect();
    let Some(first) = rows.first() else {
        return Ok(String::new());
    };
    let (rate, burst) = rate_burst(&first["write_budget"])?;
    let mut out = format!(
        "\n## With the default write budget\n\n\
         The pair rows above run with the per-namespace budget of AWS writes off \
         (`--namespace-aws-write-rate 0`): they measure the operator. These run the same workload, \
         all N pairs in one namespace, with the operator's default budget on: {rate} writes a \
         second and {burst} at once per namespace (`--namespace-aws-write-rate`, \
         `--namespace-aws-write-burst`; `cargo bench --bench scale -- --budget N`). The read budget \
         is off in both, so the write budget is the only difference. Once a namespace has spent \
         its burst it gets {rate} writes a second: its passes wait their turn as the budget \
         refills, without taking a reconcile slot (each wait a deferral, counted by \
         `s3_operator_aws_write_budget_exhausted_total`; the first object to meet the empty \
         budget gets a `WriteBudgetExhausted` event). N pairs of W AWS writes each therefore take \
         (N × W − {burst}) / {rate} seconds however fast the operator is: *the budget's time* \
         below, less the few seconds of debt the last passes may leave (a pass that has started \
         writing finishes). The operator's own part is the time beyond it. A pass the budget stops \
         at its first write has made its reads already and makes them again on its next turn: \
         the AWS reads per pair beyond the floor's are those.\n\n"
    );
    let mut lines = pair_lines(doc);
    // The pair rows' targets are the operator's; here the budget sets the pace.
    for line in lines.iter_mut().filter(|line| line.0.starts_with("Ratio")) {
        line.0 = "Ratio operator / floor, median (min–max) (no target)".into();
    }
    let extra: [Line; 6] = [
        (
            "Write budget: writes per second / at once".into(),
            Box::new(|r: &Value| {
                let (rate, burst) = rate_burst(&r["write_budget"])?;
                Ok(format!("{rate} / {burst}"))
            }),
        ),
        (
            "AWS writes per pair".into(),
            Box::new(|r: &Value| Ok(format!("{:.2}", aws_writes(r)))),
        ),
        (
            "Passes deferred by the budget".into(),
            Box::new(|r: &Value| Ok(format!("{:.0}", num(&r["write_budget"], "deferrals")?))),
        ),
        (
            "The budget's time: (N × writes per pair − burst) / rate (s)".into(),
            Box::new(|r: &Value| {
                let t = budget_time(num(r, "n")?, aws_writes(r), rate_burst(&r["write_budget"])?);
                Ok(format!("{t:.1}"))
            }),
        ),
        (
            "Apply to all Ready beyond the budget's time (s)".into(),
            Box::new(|r: &Value| {
                let t = budget_time(num(r, "n")?, aws_writes(r), rate_burst(&r["write_budget"])?);
                Ok(format!("{:.1}", num(r, "converge_s")? - t))
            }),
        ),
        (
            "The same N without the budget: apply to all Ready (s)".into(),
            Box::new(move |r: &Value| {
                Ok(match unbudgeted(doc, r) {
                    Some(off) => {
                        format!("{:.1} ({})", num(off, "converge_s")?, provenance(doc, off)?)
                    }
                    None => "not measured".into(),
                })
            }),
        ),
    ];
    lines.extend(extra);
    out += &columns(&rows, &lines)?;
    out += &waits(doc, &rows, (rate, burst))?;
    out += &why_the_default(rate, burst, aws_writes(first));
    Ok(out)
}

/// What applying N pairs in one namespace waits under the default budget, at every N measured.
fn waits(doc: &Value, budgeted: &[&Value], budget: (f64, f64)) -> Result<String> {
    let mut out = String::from(
        "\n### What applying N pairs in one namespace waits\n\n\
         At every N measured, the budget's time from the AWS writes per pair measured at that N \
         (with the budget off where that row exists), beside the operator's time to all Ready \
         without the budget and with it.\n\n\
         | pairs | AWS writes per pair | without the budget, measured (s) | the budget's time (s) \
         | with the budget, measured (s) |\n|---|---|---|---|---|\n",
    );
    let mut ns: Vec<u64> = rows_of(doc, "Pairs")
        .chain(budgeted.iter().copied())
        .filter_map(|r| r["n"].as_u64())
        .collect();
    ns.sort_unstable();
    ns.dedup();
    let converged = |r: Option<&Value>| -> Result<String> {
        Ok(match r {
            Some(r) => format!("{:.1}", num(r, "converge_s")?),
            None => "—".into(),
        })
    };
    for n in ns {
        let off = rows_of(doc, "Pairs").find(|r| r["n"].as_u64() == Some(n));
        let on = budgeted
            .iter()
            .copied()
            .find(|r| r["n"].as_u64() == Some(n));
        let Some(writes) = off.or(on).map(aws_writes) else {
            continue;
        };
        let t = budget_time(n as f64, writes, budget);
        let minutes = if t >= 120.0 {
            format!(" ({:.1} min)", t / 60.0)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {n} | {writes:.2} | {} | {t:.1}{minutes} | {} |",
            converged(off)?,
            converged(on)?
        );
    }
    Ok(out)
}

/// Why the default budget is what it is.
fn why_the_default(rate: f64, burst: f64, writes: f64) -> String {
    let pairs = if writes > 0.0 {
        format!(
            ": at {writes:.2} writes per pair, the first {:.0} pairs a team applies go through at \
             the operator's own speed",
            (burst / writes).floor()
        )
    } else {
        String::new()
    };
    format!(
        "\n### Why {rate} writes a second and {burst} at once\n\n\
         The budget is per namespace, so it is sized for several busy namespaces sharing one AWS \
         account. What it counts are control-plane writes: creating and configuring buckets, and \
         creating IAM users, their policies and keys. AWS asks for both to be kept off an \
         application's critical path. The S3 User Guide says bucket operations work against a \
         centralized, global resource space and recommends creating, deleting and configuring \
         buckets in a setup routine that runs less often ([General purpose buckets \
         overview](https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingBucket.html)). The \
         IAM User Guide says the same of creating and updating users, groups, roles and policies, \
         which IAM replicates around the world before they take effect ([What is \
         IAM?](https://docs.aws.amazon.com/IAM/latest/UserGuide/introduction.html)). And the IAM \
         and STS calls of the console, the CLI and every application in an account count toward \
         one maximum rate for the account, which cannot be raised ([AWS Knowledge Center: API \
         throttling or \"Rate exceeded\" errors for IAM and AWS \
         STS](https://repost.aws/knowledge-center/iam-sts-throttling-error)).\n\n\
         None of these pages gives that rate as a number, so the default is this project's \
         judgement, not a quoted AWS limit (its reasoning is in `src/aws/budget.rs`): these \
         control planes take a few tens of writes a second per account, so at {rate} a second per \
         namespace a handful of busy namespaces together stay within them, and the AWS SDK's \
         retries with backoff are left for a rare throttle instead of being every namespace's \
         steady state. The burst of {burst} is there so that a team applying a few dozen objects \
         at once never waits{pairs}. Both are per installation \
         (`--namespace-aws-write-rate`, `--namespace-aws-write-burst`; a rate of 0 turns the \
         budget off): an account with one busy team, or with AWS's throttling observed to be \
         higher, can raise them.\n"
    )
}

/// "met" or "missed, target ..." for a figure against its target.
fn verdict(met: bool, target: &str) -> String {
    if met {
        "met".into()
    } else {
        format!("missed, target {target}")
    }
}

fn targets(doc: &Value) -> Result<String> {
    let mut out = String::from("\n## Targets\n\n");
    for r in rows_of(doc, "Pairs") {
        let n = num(r, "n")?;
        let (target, rss_max) = if n <= 1000.0 {
            (1.1, 40.0)
        } else {
            (1.3, 100.0)
        };
        let ratio_mid = num(r, "ratio")?;
        let rss = num(r, "rss_peak_mib")?;
        let synced = num(r, "caches_synced_s")?;
        let (aws, kube) = (
            num(r, "resync_aws_writes")?.abs(),
            num(r, "resync_kube_writes")?.abs(),
        );
        let (s3, iam) = (
            num(r, "resync_s3_reads_per_pair")?,
            num(r, "resync_iam_reads_per_access")?,
        );
        let problems = r["audit_problems"].as_array().map_or(0, Vec::len);
        let _ = writeln!(
            out,
            "- N = {n} ({provenance}): ratio {ratio} ({}); peak RSS {rss:.1} MiB ({}); caches synced \
             at start {synced:.2} s ({}); resync writes AWS {aws} / API {kube} ({}); resync S3 reads \
             per pair {s3:.2} and IAM reads per BucketAccess {iam:.2} ({}); audit {}.",
            verdict(ratio_mid <= target, &format!("{target}x")),
            verdict(rss < rss_max, &format!("under {rss_max} MiB")),
            verdict(synced < 3.0, "under 3 s"),
            verdict(aws + kube == 0.0, "0"),
            verdict(s3 <= 3.0 && iam <= 3.0, "at most 3 per object"),
            if problems == 0 {
                "clean".to_string()
            } else {
                format!("{problems} problems")
            },
            provenance = provenance(doc, r)?,
            ratio = ratio(r)?,
        );
    }
    Ok(out)
}

/// The Buckets-only rows next to the quoted peer reference.
fn peer_section(doc: &Value) -> Result<String> {
    let peer = &doc["peer_reference"];
    if peer.is_null() {
        return Ok(String::new());
    }
    let mut out = format!(
        "\n## Buckets only, next to the peer reference\n\n{}\n\n\
         | N | tool | all Ready (s) | ratio to floor | AWS calls per bucket (converge / full resync) \
         | API writes per bucket | peak RSS (MiB) | CPU converging (s) |\n|---|---|---|---|---|---|---|---|\n",
        text(peer, "note")?.trim_end()
    );
    for r in rows_of(doc, "Buckets") {
        let resync =
            num(r, "resync_s3_reads_per_pair")? + num(r, "resync_aws_writes")?.abs() / num(r, "n")?;
        let _ = writeln!(
            out,
            "| {} | this operator, {} | {:.1} | {} | {:.2} / {resync:.2} | {:.2} | {:.1} | {:.1} |",
            num(r, "n")?,
            provenance(doc, r)?,
            num(r, "converge_s")?,
            ratio(r)?,
            total(r, "operator_calls"),
            total(r, "kube_writes"),
            num(r, "rss_peak_mib")?,
            num(r, "cpu_converge_s")?,
        );
    }
    let source = format!("quoted: {}", text(peer, "source")?);
    for cells in peer["rows"].as_array().into_iter().flatten() {
        let cells: Vec<&str> = cells
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let [n, tool, rest @ ..] = cells.as_slice() else {
            return Err("BENCHMARKS.json: a peer_reference row has fewer than 2 cells".into());
        };
        let _ = writeln!(out, "| {n} | {tool}, {source} | {} |", rest.join(" | "));
    }
    Ok(out)
}

/// Per-operation calls per object, operator next to floor, and the API writes.
fn calls_tables(doc: &Value) -> Result<String> {
    let mut out = String::from("\n## Calls per object while converging\n");
    for r in doc["rows"].as_array().into_iter().flatten() {
        let unit = if r["workload"] == "Buckets" {
            "bucket"
        } else {
            "pair"
        };
        let with = if budgeted(r) {
            " with the default write budget"
        } else {
            ""
        };
        let _ = write!(
            out,
            "\nN = {} {unit}s{with} ({}):\n\n| operation | operator | floor |\n|---|---|---|\n",
            num(r, "n")?,
            provenance(doc, r)?
        );
        let mut ops: Vec<&String> = ["operator_calls", "floor_calls"]
            .iter()
            .filter_map(|k| r[*k].as_object())
            .flat_map(|m| m.keys())
            .collect();
        ops.sort();
        ops.dedup();
        for op in ops {
            let count = |k: &str| r[k][op.as_str()].as_f64().unwrap_or(0.0);
            let _ = writeln!(
                out,
                "| {op} | {:.2} | {:.2} |",
                count("operator_calls"),
                count("floor_calls")
            );
        }
        let _ = write!(out, "\n| API write | per {unit} |\n|---|---|\n");
        for (k, v) in r["kube_writes"].as_object().into_iter().flatten() {
            let _ = writeln!(out, "| {k} | {:.2} |", v.as_f64().unwrap_or(0.0));
        }
    }
    Ok(out)
}

/// Growth over the second half of the churn run at most this is reported flat.
const CHURN_FLAT_MIB: f64 = 1.0;

fn churn(doc: &Value) -> Result<String> {
    let c = &doc["churn"];
    if c.is_null() {
        return Ok(String::new());
    }
    let mut out = format!("\n## Memory under churn\n\n({})\n\n", provenance(doc, c)?);
    let samples = c["samples"].as_array().cloned().unwrap_or_default();
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return Ok(out + "The churn run finished no cycle.\n");
    };
    let rss = |s: &Value| num(s, "rss_mib");
    // The second half: past the start-up and the first fill of every cache and pool.
    let half = &samples[samples.len() / 2..];
    let half_rss = half.iter().map(rss).collect::<Result<Vec<f64>>>()?;
    let low = half_rss.iter().copied().fold(f64::MAX, f64::min);
    let high = half_rss.iter().copied().fold(0.0, f64::max);
    let growth = rss(last)? - half_rss[0];
    let batch = num(c, "batch")?;
    let _ = write!(
        out,
        "`--churn {secs},{batch}`: {batch} pairs created, made Ready, deleted and waited out, over \
         and over: {cycles} cycles, {pairs} pairs in {took:.0} s, one operator process. RSS after \
         the first cycle {start:.1} MiB. Over the second half (from {from:.0} s) RSS stays between \
         {low:.1} and {high:.1} MiB and ends {growth:+.1} MiB from where that half began. Flat, \
         within {CHURN_FLAT_MIB} MiB: {verdict}.\n\n\
         | cycle | after (s) | RSS (MiB) | of which heap and stacks (MiB) |\n|---|---|---|---|\n",
        secs = num(c, "seconds")?,
        cycles = samples.len(),
        pairs = samples.len() as f64 * batch,
        took = num(last, "elapsed_s")?,
        start = rss(first)?,
        from = num(&half[0], "elapsed_s")?,
        verdict = if growth <= CHURN_FLAT_MIB {
            "met"
        } else {
            "missed"
        },
    );
    let step = samples.len().div_ceil(12).max(1);
    for (i, s) in samples.iter().enumerate() {
        if i % step == 0 || i + 1 == samples.len() {
            let _ = writeln!(
                out,
                "| {} | {:.0} | {:.1} | {:.1} |",
                num(s, "cycle")?,
                num(s, "elapsed_s")?,
                rss(s)?,
                num(s, "anon_mib")?
            );
        }
    }
    Ok(out)
}

fn fairness(doc: &Value) -> Result<String> {
    let f = &doc["fairness"];
    if f.is_null() {
        return Ok(String::new());
    }
    let (idle, worst) = (num(f, "idle_ready_s")?, num(f, "flooded_ready_max_s")?);
    let flood = num(f, "flood")?;
    Ok(format!(
        "\n## One namespace flooding, another waiting\n\n({provenance})\n\n\
         `--fairness {flood}`: a cluster-wide operator with its defaults (10 reconciles at once per \
         kind, served in turns by namespace; {rate} AWS writes per second and {burst} at once per \
         namespace). One namespace applies {flood} Buckets, 32 at a time; another applies a single \
         Bucket {samples} times while the flood converges (the first while it is still being \
         applied, then every 2 s), after {samples} samples on the idle operator.\n\n\
         | single Bucket, time to Ready | seconds |\n|---|---|\n\
         | idle operator, median | {idle:.3} |\n\
         | during the flood, median | {p50:.3} |\n\
         | during the flood, worst | {worst:.3} |\n\
         | the flood's own convergence ({flood} Buckets) | {conv:.1} |\n\n\
         The flood's passes deferred by its write budget: {deferred:.0}. Target: the worst single \
         Bucket within 2 s of the idle operator's time: {verdict}.\n",
        provenance = provenance(doc, f)?,
        rate = num(f, "write_rate")?,
        burst = num(f, "write_burst")?,
        samples = num(f, "samples")?,
        p50 = num(f, "flooded_ready_p50_s")?,
        conv = num(f, "flood_converge_s")?,
        deferred = num(f, "budget_deferrals")?,
        verdict = if worst <= idle + 2.0 { "met" } else { "missed" },
    ))
}

fn sweep(doc: &Value) -> Result<String> {
    let w = &doc["sweep"];
    if w.is_null() {
        return Ok(String::new());
    }
    let calls = w["calls"]
        .as_object()
        .ok_or("BENCHMARKS.json: `sweep.calls`")?;
    let mut out = format!(
        "\n## The orphan sweep\n\n({provenance})\n\n\
         `--sweep {pairs}`: {pairs} Bucket + BucketAccess pairs converged, nothing orphaned, the \
         sweep every {period}s (the default is 10 minutes) and no resync: the AWS calls between \
         the starts of two consecutive sweeps, which are one sweep's.\n\n\
         | call | per sweep |\n|---|---|\n",
        provenance = provenance(doc, w)?,
        pairs = num(w, "pairs")?,
        period = num(w, "period_s")?,
    );
    for (call, n) in calls {
        let _ = writeln!(out, "| {call} | {} |", n.as_f64().ok_or("a number")?);
    }
    Ok(out)
}

fn accounts(doc: &Value) -> Result<String> {
    let a = &doc["accounts"];
    if a.is_null() {
        return Ok(String::new());
    }
    let per_pair = |side: &str| -> Result<f64> {
        let calls = a[side]
            .as_object()
            .ok_or("BENCHMARKS.json: `accounts` calls")?;
        Ok(calls.values().filter_map(Value::as_f64).sum())
    };
    let (floor, operator) = (per_pair("floor_calls")?, per_pair("operator_calls")?);
    let sts = a["operator_calls"]
        .as_object()
        .ok_or("BENCHMARKS.json: `accounts.operator_calls`")?
        .iter()
        .filter(|(k, _)| k.starts_with("sts:"))
        .filter_map(|(_, v)| v.as_f64())
        .sum::<f64>();
    let mut out = format!(
        "\n## Pairs over three accounts\n\n({provenance})\n\n\
         `--accounts {n}`: {n} Bucket + BucketAccess pairs, a third in each of three namespaces \
         whose default classes place them in the operator's own account and in two others it \
         assumes a role in (with an ExternalId), all applied at once. The floor makes the same \
         {n} pairs' calls directly in the operator's own account (one emulator serves every \
         account).\n\n\
         | | floor | operator |\n|---|---|---|\n\
         | seconds | {fs:.1} | {cs:.1} ({ratio:.2}x) |\n\
         | AWS calls per pair | {floor:.2} | {operator:.2} (STS {sts:.3}) |\n\
         | AWS calls that failed | | {failed:.0} |\n\
         | peak RSS (MiB) | | {rss:.1} |\n\n\
         | AWSAccount | AssumeRole calls while converging |\n|---|---|\n",
        provenance = provenance(doc, a)?,
        n = num(a, "n")?,
        fs = num(a, "floor_s")?,
        cs = num(a, "converge_s")?,
        ratio = num(a, "ratio")?,
        failed = num(a, "aws_failures")?,
        rss = num(a, "rss_peak_mib")?,
    );
    let assumed = a["assume_role"]
        .as_object()
        .ok_or("BENCHMARKS.json: `accounts.assume_role`")?;
    for (name, count) in assumed {
        let _ = writeln!(out, "| {name} | {} |", count.as_f64().ok_or("a number")?);
    }
    let _ = writeln!(
        out,
        "\nThe SDK's identity cache asks STS again only when a session nears its end: with STS's \
         default session of {session} s that is one AssumeRole per account per hour, whatever \
         the number of objects or passes. The operator's own account assumes nothing.",
        session = num(a, "session_s")?,
    );
    Ok(out)
}

/// Where a pair's time goes, for every pair row that measured it.
fn breakdown(doc: &Value) -> Result<String> {
    let rows: Vec<&Value> = rows_of(doc, "Pairs")
        .filter(|r| r["breakdown"].is_object())
        .collect();
    if rows.is_empty() {
        return Ok(String::new());
    }
    let mut out = String::from(
        "\n## Where a pair's time goes\n\n\
         Seconds per pair while converging, summed over the Bucket and the BucketAccess and over \
         every pass (a pass and its echoes), from the operator's own histograms: \
         `s3_operator_reconcile_slot_seconds` (a slot, which a pass gives back once its AWS calls \
         are done), `workqueue_work_duration_seconds` (the whole pass: what follows the slot is \
         the writes reporting it), `s3_operator_aws_request_duration_seconds`, \
         `s3_operator_kube_write_duration_seconds`, `s3_operator_gate_wait_seconds` and \
         `workqueue_queue_duration_seconds`. The floor's AWS time is from its own client, at the \
         same concurrency (10 slots per kind). A slot's time divided by the 20 slots is the \
         shortest wall time the slots allow. Rows measured before passes gave their slot back \
         early have every write in the slot.\n\n| |",
    );
    for r in &rows {
        let _ = write!(out, " N = {} |", num(r, "n")?);
    }
    out += &format!("\n|---|{}\n", "---|".repeat(rows.len()));
    type Figure<'a> = (&'a str, &'a dyn Fn(&Value) -> Result<f64>);
    let lines: [Figure; 10] = [
        ("Floor: AWS calls (s)", &|b| num(b, "floor_aws_s")),
        ("Operator: AWS calls (s)", &|b| num(b, "aws_s")),
        ("Operator: API writes in the slot (s)", &|b| {
            num(b, "kube_writes_s")
        }),
        ("Operator: rest of the slot (s)", &|b| {
            num(b, "rest_of_slot_s")
        }),
        ("Operator: slot total (s)", &|b| {
            Ok(num(b, "aws_s")? + num(b, "kube_writes_s")? + num(b, "rest_of_slot_s")?)
        }),
        ("Operator: API writes after the slot (s)", &|b| {
            Ok(b["writes_after_slot_s"].as_f64().unwrap_or(0.0))
        }),
        ("Operator: waiting at the fair gate (s)", &|b| {
            num(b, "gate_wait_s")
        }),
        ("Operator: waiting in the queue besides (s)", &|b| {
            num(b, "other_queue_wait_s")
        }),
        ("Reconciles per pair", &|b| num(b, "reconciles")),
        ("API writes' share of the slot (%)", &|b| {
            let slot = num(b, "aws_s")? + num(b, "kube_writes_s")? + num(b, "rest_of_slot_s")?;
            Ok(100.0 * num(b, "kube_writes_s")? / slot.max(f64::MIN_POSITIVE))
        }),
    ];
    for (label, cell) in lines {
        out += &format!("| {label} |");
        for r in &rows {
            let _ = write!(out, " {:.3} |", cell(&r["breakdown"])?);
        }
        out.push('\n');
    }
    Ok(out)
}

/// With the resync at its default, 10 minutes without drift events and 6 hours with them.
const RESYNCS_PER_HOUR_OFF: f64 = 6.0;
const RESYNCS_PER_HOUR_ON: f64 = 1.0 / 6.0;

fn drift(doc: &Value) -> Result<String> {
    let d = &doc["drift"];
    if d.is_null() {
        return Ok(String::new());
    }
    let pairs = |key: &str| -> Result<Vec<(f64, f64)>> {
        let rows = d[key]
            .as_array()
            .ok_or(format!("BENCHMARKS.json: `drift.{key}`"))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r[0].as_f64().ok_or("a number")?,
                    r[1].as_f64().ok_or("a number")?,
                ))
            })
            .collect()
    };
    let (on, off) = (pairs("events_on_s")?, pairs("events_off_s")?);
    let mut out = format!(
        "\n## Drift found by events\n\n({provenance})\n\n\
         `--drift`: one Bucket and one BucketAccess; a public access block removed, the bucket \
         policy replaced and the user policy widened in AWS at once, {samples} times; the time \
         from the changes to each correction. Events on: `--drift-events-queue-url` with a \
         one-hour resync, so only the event explains a correction. Events off: \
         `--resync-period {resync}`; each round starts right after the resync that corrected the \
         previous one, so it waits about a whole period (the default, 10m, waits up to 11 \
         minutes).\n\n\
         | change | events on: median / worst (s) | events off: median / worst (s) |\n|---|---|---|\n",
        provenance = provenance(doc, d)?,
        samples = num(d, "samples")?,
        resync = text(d, "events_off_resync")?,
    );
    let names = [
        "public access block removed",
        "bucket policy replaced",
        "user policy widened",
    ];
    for (name, ((on_m, on_w), (off_m, off_w))) in names.iter().zip(on.iter().zip(&off)) {
        let _ = writeln!(
            out,
            "| {name} | {on_m:.2} / {on_w:.2} | {off_m:.1} / {off_w:.1} |"
        );
    }
    let polls = num(d, "queue_polls_per_hour")?;
    let _ = write!(
        out,
        "\nAn idle operator with events on read its queue {polls:.0} times an hour (20 s long \
         polls, measured over {window:.0} s{messages}) and made {other:.0} other AWS calls.\n\n\
         Resync reads per object per hour, with the resync at its default: the S3 and IAM reads \
         one resync makes per pair (the pair rows above, from their own run) times the resyncs \
         an hour ({off} without events, 1 every 6 hours with them), over the pair's 2 objects; \
         with events, the queue's reads shared by the pairs are added. Target: at least 10 \
         times fewer with events.\n\n\
         | pairs | reads per pair per resync | events off | events on | fewer |\n|---|---|---|---|---|\n",
        window = num(d, "idle_window_s")?,
        // Recorded since the suite's smoke run showed other tests' IAM writes arriving.
        messages = match d["idle_messages"].as_f64() {
            Some(m) => format!("; {m:.0} messages arrived meanwhile"),
            None => String::new(),
        },
        other = num(d, "idle_other_calls")?,
        off = RESYNCS_PER_HOUR_OFF,
    );
    for r in rows_of(doc, "Pairs").filter(|r| r["n"].as_f64() >= Some(1000.0)) {
        let n = num(r, "n")?;
        let per_pass = num(r, "resync_s3_reads_per_pair")? + num(r, "resync_iam_reads_per_access")?;
        let reads_off = per_pass * RESYNCS_PER_HOUR_OFF / 2.0;
        let reads_on = per_pass * RESYNCS_PER_HOUR_ON / 2.0 + polls / (2.0 * n);
        let _ = writeln!(
            out,
            "| {n} | {per_pass:.2} | {reads_off:.2} | {reads_on:.3} | {:.0}× |",
            reads_off / reads_on
        );
    }
    Ok(out)
}

fn header(doc: &Value) -> Result<String> {
    let run = &doc["run"];
    let concurrency = doc["rows"][0]["concurrency"].as_u64().unwrap_or(0);
    Ok(format!(
        "# Benchmarks\n\n\
         Rendered from BENCHMARKS.json (the same figures, for tools) by the benchmark's `--write` \
         and by `cargo xtask generate`; `cargo xtask check` fails when this file differs from that \
         rendering, so do not edit it by hand. The benchmark is `benches/scale.rs`.\n\n\
         The run that last wrote BENCHMARKS.json: {date}, commit `{commit}`, \
         `cargo bench --bench scale -- {args}`. Machine: {machine}. kube-apiserver, etcd and moto \
         run on the operator's machine; with `--pin`, moto (one core at most: Python's lock) has \
         the last CPU to itself and everything else the others, as AWS never shares the \
         operator's CPUs. Unpinned, the floor's emulator shares the cores with the floor's client \
         alone and the operator's with the API server, etcd and the operator, so part of the \
         ratio is the emulator slowed by its neighbours. Pinned, the control plane, the operator \
         and the benchmark's own client share what moto leaves: their busy figures in the pairs \
         table (which leave out the client's few hundredths), summed, say how close that share is \
         to full (1 on 2 cores), and so whether the operator waits on the emulator or on the CPU \
         its API server needs.\n\n\
         **Quoted** marks figures that run did not measure. `--write` keeps every row and section \
         it does not re-measure from the previous BENCHMARKS.json, marked with the date and commit \
         of the run that measured them (`-dirty`: with uncommitted changes on that commit); the \
         peer reference is quoted from the source it names. Quoted figures describe the code as it \
         was then.\n\n\
         **Ratios** operator / floor are the median of `--runs` runs at the same N (3 by default), \
         with the lowest and highest in brackets, since one run varies by about ±15% on this \
         machine; the other figures of that N come from the median run. A ratio measured before \
         `--runs` existed is one run and says so.\n\n\
         Each run starts from an empty control plane and emulator. The floor makes the same AWS \
         calls directly (the operator's own AWS client code, credentials and policy, \
         {concurrency} at a time per kind) with no Kubernetes in the way; the operator runs with \
         `--max-concurrent-reconciles {concurrency}`.\n\n",
        date = text(run, "date")?,
        commit = text(run, "commit")?,
        args = text(run, "args")?,
        machine = text(run, "machine")?,
    ))
}

/// Why each API write per object is there: the design the benchmark's writes are checked against.
const WRITES: &str = "
## The API writes a new object costs, and why each is needed

| write | Bucket | BucketAccess | why |
|---|---|---|---|
| finalizer (`patch`) | 1 | 1 | without it a deleted object would leave its bucket, IAM user and keys behind in AWS |
| status (`patch_status`) | 1 | 1 | Ready, the bucket's name and ARN, the key id and rotation times: what users and the BucketAccess read |
| event (`publish`) | 1 | 1 | what was created in AWS (`Created`), for `kubectl describe` and audit |
| Secret (`apply`) | | 1 | the credentials the workload mounts |

A pair therefore costs 7 writes and a Bucket alone 3. A BucketAccess created before its Bucket
has reported anything writes nothing and waits for the Bucket's first status write, which wakes
it, instead of writing a `BucketNotReady` status the Bucket's pass would overturn within the
second; it still reports `BucketNotReady` when the Bucket has reported that it is not Ready. The
steady state writes nothing (the resync rows above).

Writes cost round trips, which the floor does not pay. A pass sends its finalizer patch
together with its first reads (the finalizer must precede AWS writes, not reads), a
BucketAccess reads its Secret in the same round trip, and the event goes out with the status.
A pass gives its reconcile slot back once its AWS calls are done, so the Secret, status and
event writes that report them keep no other pass waiting: inside the slot, a new Bucket waits
for one round trip to the API server (its finalizer), a new BucketAccess for two (its
finalizer, its Secret read).
";

/// BENCHMARKS.md for the document of BENCHMARKS.json.
pub fn render(doc: &Value) -> Result<String> {
    Ok(header(doc)?
        + &pairs_table(doc)?
        + &targets(doc)?
        + &budget(doc)?
        + &peer_section(doc)?
        + WRITES
        + &breakdown(doc)?
        + &calls_tables(doc)?
        + &churn(doc)?
        + &fairness(doc)?
        + &drift(doc)?
        + &sweep(doc)?
        + &accounts(doc)?)
}
