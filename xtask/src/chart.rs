//! The Helm chart's Deployment against config/manager, its single source: the chart's pod spec,
//! rendered with the chart's default values, must run the container config/manager describes.
//!
//! Helm is not needed: the pod spec of `templates/deployment.yaml` is rendered here by a small
//! interpreter of the template constructs it uses (`if`, `with`, `end`, `.Values` paths, `quote`,
//! `join`, `toYaml`, `nindent` and the chart's naming helpers). Anything else in a branch the
//! default values take fails the check, so the interpreter can never skip what it does not know.

use std::path::Path;

use serde_yaml::Value;

use crate::bundle::manager_deployment;
use crate::{Error, read, read_yaml, shape};

pub const TEMPLATE: &str = "charts/s3-operator/templates/deployment.yaml";
pub const VALUES: &str = "charts/s3-operator/values.yaml";
pub const CHART: &str = "charts/s3-operator/Chart.yaml";
/// The release the comparison renders, named as the chart so its names are config/manager's
/// (the ServiceAccount, the Lease `<fullname>-leader`).
const RELEASE: &str = "s3-operator";

const POD_KEYS: [&str; 5] = [
    "serviceAccountName",
    "automountServiceAccountToken",
    "enableServiceLinks",
    "terminationGracePeriodSeconds",
    "securityContext",
];
const CONTAINER_KEYS: [&str; 9] = [
    "name",
    "image",
    "imagePullPolicy",
    "args",
    "ports",
    "livenessProbe",
    "readinessProbe",
    "securityContext",
    "resources",
];
/// Variables config/manager sets that the chart's defaults leave out: the chart leaves the region
/// to the AWS default chain unless `aws.region` is set; config/manager names it for you to edit.
const BASE_ONLY_ENV: [&str; 1] = ["AWS_REGION"];

/// How the chart's Deployment with default values differs from config/manager's, one entry per
/// difference (empty: none).
pub fn differences(root: &Path) -> Result<Vec<String>, Error> {
    let chart = render_pod_spec(root)?;
    let base = manager_deployment(root)?["spec"]["template"]["spec"].clone();
    let mut out = Vec::new();
    for key in POD_KEYS {
        compare(&mut out, &format!("pod {key}"), &chart[key], &base[key]);
    }
    let (chart, base) = (
        only_container(&chart, TEMPLATE)?,
        only_container(&base, "config/manager")?,
    );
    for key in CONTAINER_KEYS {
        compare(
            &mut out,
            &format!("container {key}"),
            &chart[key],
            &base[key],
        );
    }
    let base_env: Vec<_> = env(base)
        .into_iter()
        .filter(|(name, _)| !BASE_ONLY_ENV.contains(&name.as_str()))
        .collect();
    env_differences(&mut out, &env(chart), &base_env);
    Ok(out)
}

/// Differences down to the field: mappings key by key, anything else whole.
fn compare(out: &mut Vec<String>, what: &str, chart: &Value, base: &Value) {
    if let (Value::Mapping(c), Value::Mapping(b)) = (chart, base) {
        let only_chart = c.keys().filter(|k| !b.contains_key(*k));
        for key in b.keys().chain(only_chart) {
            let at = format!("{what}.{}", text_of(key));
            let (c, b) = (c.get(key), b.get(key));
            compare(
                out,
                &at,
                c.unwrap_or(&Value::Null),
                b.unwrap_or(&Value::Null),
            );
        }
    } else if chart != base {
        out.push(format!(
            "{what}:\n    chart:          {}\n    config/manager: {}",
            one_line(chart),
            one_line(base)
        ));
    }
}

fn one_line(v: &Value) -> String {
    serde_json::to_string(v).expect("YAML values serialize as JSON")
}

fn only_container<'a>(spec: &'a Value, source: &str) -> Result<&'a Value, Error> {
    match spec["containers"].as_sequence().map(Vec::as_slice) {
        Some([one]) => Ok(one),
        _ => Err(shape(source, "the pod must have exactly one container")),
    }
}

/// `(name, value)` in order; a value is its text (YAML may quote it in one file and not the
/// other) or its `valueFrom`.
fn env(container: &Value) -> Vec<(String, String)> {
    let entries = container["env"].as_sequence().cloned().unwrap_or_default();
    entries
        .iter()
        .map(|e| {
            let value = match &e["value"] {
                Value::Null => one_line(&e["valueFrom"]),
                v => scalar(v).unwrap_or_else(|| one_line(v)),
            };
            (scalar(&e["name"]).unwrap_or_default(), value)
        })
        .collect()
}

fn env_differences(out: &mut Vec<String>, chart: &[(String, String)], base: &[(String, String)]) {
    let find = |list: &[(String, String)], name: &str| {
        list.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    };
    for (name, value) in base {
        match find(chart, name) {
            None => out.push(format!(
                "env {name}: config/manager sets {value}, the chart does not"
            )),
            Some(c) if c != *value => out.push(format!(
                "env {name}:\n    chart:          {c}\n    config/manager: {value}"
            )),
            Some(_) => {}
        }
    }
    for (name, value) in chart {
        if find(base, name).is_none() {
            out.push(format!(
                "env {name}: the chart sets {value}, config/manager does not"
            ));
        }
    }
    let names = |list: &[(String, String)]| list.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    let (c, b) = (names(chart), names(base));
    let same_set = c.len() == b.len() && c.iter().all(|n| b.contains(n));
    if same_set && c != b {
        // Order matters: a value may refer to an earlier variable as $(NAME).
        out.push(format!(
            "env order:\n    chart:          {c:?}\n    config/manager: {b:?}"
        ));
    }
}

/// The template's pod spec rendered with the chart's default values: from `spec:` under
/// `template:` through the containers.
fn render_pod_spec(root: &Path) -> Result<Value, Error> {
    let text = read(root, TEMPLATE)?;
    let lines = pod_spec_lines(&text).ok_or_else(|| {
        shape(
            TEMPLATE,
            "has no `    spec:` under `  template:` with `      containers:`",
        )
    })?;
    let chart = read_yaml(root, CHART)?;
    let values = read_yaml(root, VALUES)?;
    let rendered = Renderer {
        chart: &chart,
        values: &values,
    }
    .render(lines)?;
    let doc: Value = serde_yaml::from_str(&rendered).map_err(|source| Error::Yaml {
        path: format!("{TEMPLATE} (rendered with default values)"),
        source,
    })?;
    Ok(doc["spec"].clone())
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The lines of the pod spec, up to the first line after `containers:` back at the pod's keys.
fn pod_spec_lines(text: &str) -> Option<Vec<&str>> {
    let lines: Vec<&str> = text.lines().collect();
    let template = lines.iter().position(|l| *l == "  template:")?;
    let spec = template + lines[template..].iter().position(|l| *l == "    spec:")?;
    let containers = spec
        + lines[spec..]
            .iter()
            .position(|l| *l == "      containers:")?;
    let end = lines[containers + 1..]
        .iter()
        .position(|l| !l.trim().is_empty() && indent(l) <= 6)
        .map_or(lines.len(), |i| containers + 1 + i);
    Some(lines[spec..end].to_vec())
}

struct Renderer<'a> {
    chart: &'a Value,
    values: &'a Value,
}

/// One open block: whether its lines are rendered, and its `.`.
struct Frame {
    active: bool,
    dot: Value,
}

impl Renderer<'_> {
    fn render(&self, lines: Vec<&str>) -> Result<String, Error> {
        let mut stack = vec![Frame {
            active: true,
            dot: Value::Null,
        }];
        let mut out = String::new();
        for line in lines {
            let top = stack.last().expect("the outermost frame stays");
            let (active, dot) = (top.active, top.dot.clone());
            match action_of(line) {
                Some(action) => {
                    if let Some(text) = self.control(action, active, dot, &mut stack)? {
                        out += &text;
                        out.push('\n');
                    }
                }
                None if active => {
                    out += &self.substitute(line, &dot)?;
                    out.push('\n');
                }
                None => {}
            }
        }
        if stack.len() != 1 {
            return Err(shape(
                TEMPLATE,
                "a block of the pod spec is not closed by `end`",
            ));
        }
        Ok(out)
    }

    /// Opens or closes a block, or returns the text a lone action outputs.
    fn control(
        &self,
        action: &str,
        active: bool,
        dot: Value,
        stack: &mut Vec<Frame>,
    ) -> Result<Option<String>, Error> {
        let (word, rest) = action.split_once(' ').unwrap_or((action, ""));
        match word {
            _ if action.starts_with("/*") => {}
            "if" | "with" => {
                let value = if active {
                    self.eval(rest, &dot)?
                } else {
                    Value::Null
                };
                let frame = match word {
                    "if" => Frame {
                        active: truthy(&value),
                        dot,
                    },
                    _ => Frame {
                        active: truthy(&value),
                        dot: value,
                    },
                };
                stack.push(frame);
            }
            // A block in a branch the defaults do not take is skipped unread.
            "range" if !active => stack.push(Frame { active: false, dot }),
            "end" if stack.len() > 1 => {
                stack.pop();
            }
            // `else` would need to know why its block is off; nothing on this path uses it.
            "end" | "else" | "range" | "define" | "template" | "block" => {
                return Err(unsupported(action));
            }
            _ if !active => {}
            _ => return Ok(Some(text_of(&self.eval(action, &dot)?))),
        }
        Ok(None)
    }

    /// `line` with each `{{ pipeline }}` replaced by its value.
    fn substitute(&self, line: &str, dot: &Value) -> Result<String, Error> {
        let mut out = String::new();
        let mut rest = line;
        while let Some(open) = rest.find("{{") {
            let close = rest[open..].find("}}").ok_or_else(|| unsupported(line))? + open;
            out += &rest[..open];
            out += &text_of(&self.eval(trim_action(&rest[open + 2..close]), dot)?);
            rest = &rest[close + 2..];
        }
        Ok(out + rest)
    }

    /// A pipeline: a command, then functions applied to its value.
    fn eval(&self, pipeline: &str, dot: &Value) -> Result<Value, Error> {
        let mut stages = pipeline.split(" | ");
        let mut value = self.command(&words(stages.next().unwrap_or_default()), dot, pipeline)?;
        for stage in stages {
            value = match words(stage).as_slice() {
                [f] if f == "quote" => Value::from(quote(&text_of(&value))),
                [f, n] if f == "nindent" => {
                    let n: usize = n.parse().map_err(|_| unsupported(pipeline))?;
                    let pad = " ".repeat(n);
                    let text = text_of(&value);
                    Value::from(
                        text.lines()
                            .map(|l| format!("{pad}{l}"))
                            .collect::<Vec<_>>()
                            .join("\n"),
                    )
                }
                _ => return Err(unsupported(pipeline)),
            };
        }
        Ok(value)
    }

    fn command(&self, words: &[String], dot: &Value, pipeline: &str) -> Result<Value, Error> {
        let word = |i: usize| words.get(i).map(String::as_str).unwrap_or_default();
        Ok(match word(0) {
            "and" => {
                let mut last = Value::Null;
                for w in &words[1..] {
                    last = self.operand(w, dot).ok_or_else(|| unsupported(pipeline))?;
                    if !truthy(&last) {
                        break;
                    }
                }
                last
            }
            "include" if word(2) == "." => Value::from(self.include(&unquote(word(1)), pipeline)?),
            "join" => {
                let list = self
                    .operand(word(2), dot)
                    .ok_or_else(|| unsupported(pipeline))?;
                let parts: Vec<String> = list
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .map(text_of)
                    .collect();
                Value::from(parts.join(&unquote(word(1))))
            }
            "toYaml" => {
                let v = self
                    .operand(word(1), dot)
                    .ok_or_else(|| unsupported(pipeline))?;
                Value::from(
                    serde_yaml::to_string(&v)
                        .expect("YAML values serialize")
                        .trim_end()
                        .to_string(),
                )
            }
            w if words.len() == 1 => self.operand(w, dot).ok_or_else(|| unsupported(pipeline))?,
            _ => return Err(unsupported(pipeline)),
        })
    }

    /// `.` or a `.Values` path; None for anything else.
    fn operand(&self, word: &str, dot: &Value) -> Option<Value> {
        if word == "." {
            return Some(dot.clone());
        }
        let path = word.strip_prefix(".Values.")?;
        Some(
            path.split('.')
                .fold(self.values.clone(), |v, k| v[k].clone()),
        )
    }

    /// The chart's naming helpers (templates/_helpers.tpl) for the release `RELEASE`.
    fn include(&self, name: &str, pipeline: &str) -> Result<String, Error> {
        let v = |path: &str| {
            let value = path.split('.').fold(self.values, |v, k| &v[k]);
            text_of(value)
        };
        let or = |a: String, b: String| if a.is_empty() { b } else { a };
        let fullname = or(v("fullnameOverride"), {
            let name = or(v("nameOverride"), text_of(&self.chart["name"]));
            if RELEASE.contains(&name) {
                RELEASE.to_string()
            } else {
                format!("{RELEASE}-{name}")
            }
        });
        Ok(match name {
            "s3-operator.fullname" => fullname,
            "s3-operator.serviceAccountName"
                if truthy(&self.values["serviceAccount"]["create"]) =>
            {
                or(v("serviceAccount.name"), fullname)
            }
            "s3-operator.serviceAccountName" => or(v("serviceAccount.name"), "default".into()),
            "s3-operator.leaderElectionId" => {
                or(v("leaderElection.id"), format!("{fullname}-leader"))
            }
            "s3-operator.image" if !v("image.digest").is_empty() => {
                format!("{}@{}", v("image.repository"), v("image.digest"))
            }
            "s3-operator.image" => format!(
                "{}:{}",
                v("image.repository"),
                or(v("image.tag"), text_of(&self.chart["appVersion"]))
            ),
            _ => return Err(unsupported(pipeline)),
        })
    }
}

fn unsupported(what: &str) -> Error {
    shape(
        TEMPLATE,
        format!(
            "xtask/src/chart.rs cannot render `{what}` with the default values: teach it, or keep the construct out of the default path"
        ),
    )
}

/// The action of a line holding nothing but one `{{ ... }}`.
fn action_of(line: &str) -> Option<&str> {
    let t = line.trim();
    let inner = t.strip_prefix("{{")?.strip_suffix("}}")?;
    (!inner.contains("{{")).then(|| trim_action(inner))
}

fn trim_action(inner: &str) -> &str {
    inner
        .trim()
        .trim_start_matches('-')
        .trim_end_matches('-')
        .trim()
}

/// Whitespace-separated words; a double-quoted word keeps its quotes and spaces.
fn words(command: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut quoted = false;
    let mut word = String::new();
    for c in command.trim().chars() {
        match c {
            '"' => {
                quoted = !quoted;
                word.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn unquote(word: &str) -> String {
    serde_json::from_str(word).unwrap_or_else(|_| word.to_string())
}

fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("strings serialize")
}

/// Go templates' truth: false, 0, "", nil and empty collections are false.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Sequence(s) => !s.is_empty(),
        Value::Mapping(m) => !m.is_empty(),
        Value::Tagged(t) => truthy(&t.value),
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// How a value prints in a template (nil prints as nothing).
fn text_of(v: &Value) -> String {
    scalar(v).unwrap_or_else(|| match v {
        Value::Null => String::new(),
        other => one_line(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo;

    #[test]
    fn the_chart_deployment_matches_config_manager() {
        let diff = differences(&repo()).unwrap();
        assert!(diff.is_empty(), "{}", diff.join("\n"));
    }

    #[test]
    fn renders_blocks_paths_quotes_and_yaml() {
        let values: Value = serde_yaml::from_str(
            "on: true\noff: false\nname: x\nlist: [a, b]\nres: {cpu: 1m}\nempty: ''",
        )
        .unwrap();
        let chart = Value::Null;
        let r = Renderer {
            chart: &chart,
            values: &values,
        };
        let text = r
            .render(vec![
                "a: {{ .Values.name | quote }}",
                "{{- if and .Values.on .Values.off }}",
                "b: {{ .Values.nowhere.to.be.found }}",
                "{{- end }}",
                "{{- with .Values.res }}",
                "res:",
                "  {{- toYaml . | nindent 2 }}",
                "{{- end }}",
                "{{- with .Values.empty }}",
                "{{- range . }}",
                "{{- end }}",
                "{{- end }}",
                "l: {{ join \",\" .Values.list | quote }}",
            ])
            .unwrap();
        assert_eq!(text, "a: \"x\"\nres:\n  cpu: 1m\nl: \"a,b\"\n");
        // Unknown constructs on the path taken fail rather than vanish.
        assert!(
            r.render(vec!["{{- range .Values.list }}", "{{- end }}"])
                .is_err()
        );
        assert!(r.render(vec!["x: {{ default 1 .Values.name }}"]).is_err());
        assert!(r.render(vec!["{{- if .Values.on }}"]).is_err());
    }

    /// Drifts to put back: (file, text, its replacement, what the check must then report).
    const DRIFTS: [(&str, &str, &str, &str); 9] = [
        (
            TEMPLATE,
            "            periodSeconds: 10\n",
            "            periodSeconds: 11\n",
            "container readinessProbe",
        ),
        (
            VALUES,
            "    memory: 256Mi\n",
            "    memory: 512Mi\n",
            "container resources",
        ),
        (
            VALUES,
            "terminationGracePeriodSeconds: 30",
            "terminationGracePeriodSeconds: 60",
            "pod terminationGracePeriodSeconds",
        ),
        (VALUES, "logLevel: info", "logLevel: debug", "env RUST_LOG"),
        (
            crate::bundle::MANAGER,
            "args: [\"run\", \"--leader-elect\"]",
            "args: [\"run\"]",
            "container args",
        ),
        (
            crate::bundle::MANAGER,
            "              value: s3-operator-leader\n",
            "              value: other\n",
            "env LEADER_ELECTION_ID",
        ),
        (
            TEMPLATE,
            "            - name: LOG_FORMAT\n              value: {{ .Values.logFormat | quote }}\n",
            "",
            "env LOG_FORMAT: config/manager sets json, the chart does not",
        ),
        (
            VALUES,
            "  fsGroup: 65532",
            "  fsGroup: 1000",
            "pod securityContext.fsGroup",
        ),
        (
            CHART,
            "appVersion: \"",
            "appVersion: \"9",
            "container image",
        ),
    ];

    /// A copy of the chart and config/manager with each drift put back in turn: every one fails
    /// the check, naming what differs.
    #[test]
    fn drift_between_the_chart_and_config_manager_is_reported() {
        let root = repo();
        let tmp = std::env::temp_dir().join(format!("xtask-chart-{}", std::process::id()));
        let files = [TEMPLATE, VALUES, CHART, crate::bundle::MANAGER];
        for f in files {
            std::fs::create_dir_all(tmp.join(f).parent().unwrap()).unwrap();
            std::fs::copy(root.join(f), tmp.join(f)).unwrap();
        }
        assert_eq!(differences(&tmp).unwrap(), Vec::<String>::new());
        for (file, from, to, expected) in DRIFTS {
            let original = std::fs::read_to_string(root.join(file)).unwrap();
            assert!(original.contains(from), "{file} has no {from:?}");
            std::fs::write(tmp.join(file), original.replacen(from, to, 1)).unwrap();
            let diff = differences(&tmp).unwrap().join("\n");
            std::fs::write(tmp.join(file), original).unwrap();
            assert!(
                diff.contains(expected),
                "{file}: {from:?} -> {to:?} reported {diff:?}"
            );
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
