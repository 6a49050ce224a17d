//! Checks of a binary's command line as an operator meets it: every `--help` (found by walking
//! the "Commands:" sections) carries examples; the completion scripts it prints parse in their
//! shells (`bash -n`, `zsh -n`, `fish --no-execute` when fish is installed); the man pages it
//! writes exist for every subcommand and render with groff without a warning.

use std::process::Command;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every subcommand path of `--help` (parsed from the "Commands:" sections).
fn subcommands(bin: &str, path: &[String]) -> Vec<Vec<String>> {
    let out = Command::new(bin)
        .args(path)
        .arg("--help")
        .output()
        .expect("help");
    let help = text(&out.stdout);
    let mut found = vec![path.to_vec()];
    let mut in_commands = false;
    for line in help.lines() {
        if line == "Commands:" {
            in_commands = true;
            continue;
        }
        if in_commands {
            let Some(name) = line
                .strip_prefix("  ")
                .and_then(|l| l.split_whitespace().next())
            else {
                break;
            };
            if line.starts_with("   ") || name == "help" {
                continue;
            }
            let mut p = path.to_vec();
            p.push(name.to_string());
            found.extend(subcommands(bin, &p));
        }
    }
    found
}

/// Every `--help` of `bin` has examples; returns the subcommand paths.
pub fn every_help_has_examples(bin: &str) -> Vec<Vec<String>> {
    let all = subcommands(bin, &[]);
    for p in &all {
        let out = Command::new(bin)
            .args(p)
            .arg("--help")
            .output()
            .expect("help");
        assert!(out.status.success());
        let help = text(&out.stdout);
        assert!(
            help.contains("\nExamples:\n  "),
            "`{bin} {} --help` has no examples:\n{help}",
            p.join(" ")
        );
    }
    all
}

/// The completion scripts parse (`bash -n`, `zsh -n`, `fish --no-execute` when fish is
/// installed) and name every subcommand; the man pages render with groff without a warning
/// and one exists per subcommand.
pub fn completions_and_man_pages_check(bin: &str, name: &str, paths: &[Vec<String>]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let shells: &[(&str, &[&str])] = &[
        ("bash", &["-n"]),
        ("zsh", &["-n"]),
        ("fish", &["--no-execute"]),
    ];
    for (shell, check) in shells {
        let out = Command::new(bin)
            .args(["completions", shell])
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let script = dir.path().join(format!("completion.{shell}"));
        fs_err::write(&script, &out.stdout).expect("write");
        for p in paths.iter().filter(|p| p.len() == 1) {
            assert!(
                text(&out.stdout).contains(p[0].as_str()),
                "{shell}: {} missing",
                p[0]
            );
        }
        match Command::new(shell).args(*check).arg(&script).output() {
            Ok(o) => assert!(o.status.success(), "{shell} {check:?}: {}", text(&o.stderr)),
            Err(_) if *shell == "fish" => {} // not in tests/run-all's packages
            Err(e) => panic!(
                "{shell} is needed to check the completion script (tests/run-all installs it): {e}"
            ),
        }
    }
    let mandir = dir.path().join("man");
    let out = Command::new(bin)
        .args(["man", "-o"])
        .arg(&mandir)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    for p in paths {
        let page = if p.is_empty() {
            format!("{name}.1")
        } else {
            format!("{name}-{}.1", p.join("-"))
        };
        let path = mandir.join(&page);
        assert!(path.exists(), "no man page {page}");
        let out = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(&path)
            .output()
            .expect("groff (groff-base) renders man pages");
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{page}: {}",
            text(&out.stderr)
        );
    }
    let top = fs_err::read_to_string(mandir.join(format!("{name}.1"))).expect("top page");
    for p in paths.iter().filter(|p| p.len() == 1) {
        assert!(
            top.contains(&p[0].replace('-', "\\-")),
            "{name}.1 does not name {}",
            p[0]
        );
    }
}
