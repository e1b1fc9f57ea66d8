//! Running the cached tools (kubectl, helm, kustomize, ...) with their output.

use super::*;

/// Runs a tool from the cache (or PATH), feeding `stdin`; panics with its output on failure.
pub fn tool(tool: &str, args: &[&str], stdin: Option<&str>) -> String {
    let (code, out, err) = try_tool(tool, args, stdin);
    assert_eq!(code, 0, "{tool} {args:?} failed:\n{out}\n{err}");
    out
}

/// The same, without the panic: (exit code, stdout, stderr).
pub fn try_tool(tool: &str, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use std::io::Write;
    let cached = Path::new(&tools_bin()).join(tool);
    let program = if cached.exists() {
        cached.display().to_string()
    } else {
        tool.to_string()
    };
    let mut child = std::process::Command::new(&program)
        .args(args)
        .current_dir(repo())
        .env("KUBECONFIG", &env().kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (hack/tools.sh builds it)"));
    let input = stdin.unwrap_or_default().to_string();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("wait");
    writer.join().unwrap().expect("stdin");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}
