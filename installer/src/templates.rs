//! Every file KubeXM writes on a host, as tera templates from the repository's `templates/`
//! directory, embedded at build time.

use crate::pipeline::error::StepError;

macro_rules! embed {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../templates/", $name)))),*]
    };
}

/// (name, source) of every embedded template; a unit test keeps it equal to `templates/`.
pub const TEMPLATES: &[(&str, &str)] = embed![
    "addons/values.yaml.tera",
    "backup/kubexm-job.service.tera",
    "backup/kubexm-job.timer.tera",
    "chrony/managed-block.tera",
    "cni/calico-values.yaml.tera",
    "cni/cilium-values.yaml.tera",
    "cni/hybridnet-values.yaml.tera",
    "cni/kube-ovn-values.yaml.tera",
    "cni/multus.yaml.tera",
    "containerd/config-v2.toml.tera",
    "containerd/config-v3.toml.tera",
    "containerd/containerd.service.tera",
    "containerd/hosts.toml.tera",
    "containerd/mirror.toml.tera",
    "crictl/crictl.yaml.tera",
    "crio/crio.conf.tera",
    "crio/crio.service.tera",
    "crio/policy.json.tera",
    "crio/registries.conf.tera",
    "dns/nodelocaldns.yaml.tera",
    "docker/cri-docker.service.tera",
    "docker/cri-docker.socket.tera",
    "docker/daemon.json.tera",
    "docker/docker.service.tera",
    "docker/docker.socket.tera",
    "etcd/etcd.conf.yml.tera",
    "etcd/etcd.service.tera",
    "harbor/harbor.yml.tera",
    "hosts/managed-block.tera",
    "internal-lb/haproxy-pod.yaml.tera",
    "internal-lb/haproxy.cfg.tera",
    "internal-lb/kube-vip.yaml.tera",
    "internal-lb/nginx-pod.yaml.tera",
    "internal-lb/nginx.conf.tera",
    "isulad/daemon.json.tera",
    "isulad/isulad.service.tera",
    "isulad/ld.so.conf.tera",
    "kubeadm/10-kubeadm.conf.tera",
    "kubeadm/init-config.yaml.tera",
    "kubeadm/join-config.yaml.tera",
    "kubeadm/kube-apiserver-patch.yaml.tera",
    "kubeadm/kubelet.service.tera",
    "kubexm/cluster-rbac.yaml.tera",
    "kubexm/coredns.yaml.tera",
    "kubexm/kube-proxy.yaml.tera",
    "kubexm/kube-scheduler.yaml.tera",
    "kubexm/kubeconfig.tera",
    "kubexm/kubelet-config.yaml.tera",
    "kubexm/service.tera",
    "lb/haproxy.cfg.tera",
    "lb/keepalived.conf.tera",
    "lb/nginx.conf.tera",
    "lb/sysctl.conf.tera",
    "os/modules-load.conf.tera",
    "os/sysctl.conf.tera",
    "plugins/kata.yaml.tera",
    "plugins/node-feature-discovery.yaml.tera",
    "registry/config.yml.tera",
    "registry/registry.service.tera",
    "security/audit-policy.yaml.tera",
    "storage/exports-block.tera",
    "storage/local-volume.yaml.tera",
    "storage/nfs-provisioner.yaml.tera",
    "verify/probe.yaml.tera",
];

/// Renders one embedded template.
pub fn render(name: &str, context: &tera::Context) -> Result<String, StepError> {
    let Some((_, source)) = TEMPLATES.iter().find(|(n, _)| *n == name) else {
        return Err(StepError::Template {
            name: name.to_string(),
            message: "no such template is embedded".to_string(),
        });
    };
    let mut tera = engine();
    tera.add_raw_template(name, source)
        .map_err(|e| StepError::Template {
            name: name.to_string(),
            message: error_chain(&e),
        })?;
    recording::record(&tera, name, context);
    tera.render(name, context).map_err(|e| StepError::Template {
        name: name.to_string(),
        message: error_chain(&e),
    })
}

/// Renders one embedded template with a JSON object as its context (the hostile-values test
/// renders recorded contexts with their strings replaced).
///
/// # Errors
///
/// The template is unknown, `context` is not an object, or the rendering fails.
#[doc(hidden)]
pub fn render_json(name: &str, context: &serde_json::Value) -> Result<String, StepError> {
    let c = tera::Context::from_serialize(context).map_err(|e| StepError::Template {
        name: name.to_string(),
        message: error_chain(&e),
    })?;
    render(name, &c)
}

/// The contexts templates are rendered with, kept while a test records them: the hostile-values
/// test (`installer/tests/it/hostile_templates.rs`) plans real clusters, then renders every
/// recorded context again with hostile strings. Off unless [`recording::start`] was called.
#[doc(hidden)]
pub mod recording {
    use std::sync::{Mutex, PoisonError};

    /// (template, context as a JSON object) of every rendering since [`start`].
    static RECORDED: Mutex<Option<Vec<(String, serde_json::Value)>>> = Mutex::new(None);

    /// Starts keeping every rendering's context.
    pub fn start() {
        *RECORDED.lock().unwrap_or_else(PoisonError::into_inner) = Some(Vec::new());
    }

    /// Stops keeping, and returns what was kept.
    pub fn take() -> Vec<(String, serde_json::Value)> {
        RECORDED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    }

    pub(super) fn record(tera: &tera::Tera, name: &str, context: &tera::Context) {
        let mut guard = RECORDED.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(kept) = guard.as_mut() else { return };
        let Ok(vars) = tera.get_template_variables(name) else {
            return;
        };
        let object: serde_json::Map<String, serde_json::Value> = vars
            .into_iter()
            .filter_map(|k| {
                let v = serde_json::to_value(context.get(k)?).ok()?;
                Some((k.to_owned(), v))
            })
            .collect();
        kept.push((name.to_owned(), serde_json::Value::Object(object)));
    }
}

/// Tera as KubeXM uses it: HTML autoescaping off (these are config files, not HTML), and every
/// value written through the filter of its place in the target format (`templates/README.md`):
///
/// * `json`: the value as JSON (also a valid YAML double-quoted scalar and TOML basic string);
/// * `toml`: a TOML value (`json`, whose escapes TOML reads the same);
/// * `yaml`: a YAML scalar in block context: plain when that reads back as the same string,
///   else double-quoted; `yaml_flow` the same inside `{…}` or `[…]` (no plain `,`);
/// * `dq`: inside `"…"` in YAML, TOML or JSON: `json` without its quotes;
/// * `unit_exec`, `unit_word`, `unit_env`, `unit_text`: a systemd command line's program (an
///   absolute path) and its arguments, an `Environment=` assignment, any other setting's text
///   (`Description=`, `After=`, …);
/// * `conf_word`: one word of a line-based configuration (haproxy, nginx, keepalived, chrony,
///   hosts, exports, sysctl, modules-load, ld.so.conf, a Corefile): refused unless it is plain;
///   `conf_words` a list of them, joined by spaces;
/// * `comment`: text in a `#` comment: control characters shown escaped.
///
/// What cannot be written safely is refused (the rendering fails naming the template) rather
/// than written: validation refuses such values long before (`kubexm_manifests::validate`).
fn engine() -> tera::Tera {
    let mut tera = tera::Tera::default();
    tera.autoescape_on(Vec::<&str>::new());
    tera.register_filter(
        "json",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::json(&v),
    );
    tera.register_filter(
        "toml",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::json(&v),
    );
    tera.register_filter(
        "yaml",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::yaml(&v),
    );
    tera.register_filter(
        "yaml_flow",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::yaml_flow(&v),
    );
    tera.register_filter("dq", |v: tera::Value, _: tera::Kwargs, _: &tera::State| {
        escape::dq(&v)
    });
    tera.register_filter(
        "unit_word",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::unit_word(&v),
    );
    tera.register_filter(
        "unit_exec",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::unit_exec(&v),
    );
    tera.register_filter(
        "unit_env",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| {
            crate::modules::kubexm::flags::systemd_env(&escape::text(&v))
        },
    );
    tera.register_filter(
        "unit_text",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::unit_text(&v),
    );
    tera.register_filter(
        "conf_word",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::conf_word(&v),
    );
    tera.register_filter(
        "conf_words",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::conf_words(&v),
    );
    tera.register_filter(
        "comment",
        |v: tera::Value, _: tera::Kwargs, _: &tera::State| escape::comment(&v),
    );
    tera
}

/// The escaping filters' functions, one per place a value takes in a file format.
pub mod escape {
    /// The value's text as `{{ v }}` prints it (strings as they are, numbers, booleans).
    pub fn text(v: &tera::Value) -> String {
        v.as_str().map_or_else(|| v.to_string(), str::to_owned)
    }

    /// Characters JSON may hold raw that YAML or TOML do not take raw: DEL, the C1 controls,
    /// the Unicode line and paragraph separators, BOM and the non-characters.
    fn needs_u_escape(c: char) -> bool {
        matches!(
            c,
            '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
    }

    /// The value as JSON, with [`needs_u_escape`] characters as `\uXXXX`: a valid JSON value,
    /// YAML double-quoted scalar or flow collection, and TOML basic string.
    pub fn json(v: &tera::Value) -> String {
        let raw = serde_json::to_string(v).unwrap_or_default();
        if !raw.chars().any(needs_u_escape) {
            return raw;
        }
        let mut out = String::with_capacity(raw.len() + 8);
        for c in raw.chars() {
            if needs_u_escape(c) {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            } else {
                out.push(c);
            }
        }
        out
    }

    /// A string inside `"…"`: [`json`] of its text without the quotes.
    pub fn dq(v: &tera::Value) -> String {
        let quoted = json(&tera::Value::from(text(v)));
        quoted[1..quoted.len() - 1].to_owned()
    }

    /// A YAML scalar in a block mapping or sequence: strings stay plain when YAML reads the plain
    /// form back as the same string, else they are double-quoted; numbers and booleans as they
    /// are; lists and maps as JSON (a YAML flow collection).
    pub fn yaml(v: &tera::Value) -> String {
        match v.as_str() {
            Some(s) if is_plain_yaml(s) => s.to_owned(),
            Some(_) => json(v),
            None if v.is_number() || v.is_bool() => v.to_string(),
            None => json(v),
        }
    }

    /// [`yaml`] inside a flow collection, where a plain `,` would end the scalar.
    pub fn yaml_flow(v: &tera::Value) -> String {
        match v.as_str() {
            Some(s) if s.contains(',') => json(v),
            _ => yaml(v),
        }
    }

    /// Whether `s` written plain reads back as the same string (YAML 1.1 and 1.2 resolution):
    /// a letter, digit, `/`, `.` or `_` first, then letters, digits and `._/@+=~,:-`, no `:`
    /// last, and not a null, boolean, number or date.
    pub fn is_plain_yaml(s: &str) -> bool {
        let mut chars = s.chars();
        let Some(first) = chars.next() else {
            return false;
        };
        (first.is_ascii_alphanumeric() || matches!(first, '/' | '.' | '_'))
            && chars.all(|c| c.is_ascii_alphanumeric() || "._/@+=~,:-".contains(c))
            && !s.ends_with(':')
            && !resolves_to_non_string(s)
    }

    fn resolves_to_non_string(s: &str) -> bool {
        let lower = s.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "null" | "~" | "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n"
        ) {
            return true;
        }
        let unsigned = lower.trim_start_matches(['+', '-']);
        if matches!(unsigned, ".inf" | ".nan") {
            return true;
        }
        let digits = unsigned.replace('_', "");
        let all = |t: &str, f: fn(char) -> bool| !t.is_empty() && t.chars().all(f);
        if all(&digits, |c| c.is_ascii_digit())
            || digits
                .strip_prefix("0x")
                .is_some_and(|t| all(t, |c| c.is_ascii_hexdigit()))
            || digits
                .strip_prefix("0o")
                .is_some_and(|t| all(t, |c| ('0'..='7').contains(&c)))
            || digits
                .strip_prefix("0b")
                .is_some_and(|t| all(t, |c| c == '0' || c == '1'))
        {
            return true;
        }
        // Floats: `1.5`, `.5`, `1.`, `1e5`, `1.5e-3`.
        let (mantissa, exponent) = match digits.split_once('e') {
            Some((m, e)) => (m, Some(e.trim_start_matches(['+', '-']))),
            None => (digits.as_str(), None),
        };
        let mantissa_ok = {
            let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
            (!int.is_empty() || !frac.is_empty())
                && int.chars().all(|c| c.is_ascii_digit())
                && frac.chars().all(|c| c.is_ascii_digit())
                && mantissa.matches('.').count() <= 1
        };
        if mantissa_ok && exponent.is_none_or(|e| all(e, |c| c.is_ascii_digit())) {
            return true;
        }
        // YAML 1.1 sexagesimal (`1:30`) and dates (`2024-01-31`).
        let colon_parts: Vec<&str> = digits.split(':').collect();
        if colon_parts.len() > 1
            && colon_parts.iter().all(|p| {
                all(p.split_once('.').map_or(p, |(i, _)| i), |c| {
                    c.is_ascii_digit()
                })
            })
        {
            return true;
        }
        let b = s.as_bytes();
        b.len() >= 8 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
    }

    /// One argument of a systemd command line ([`crate::modules::kubexm::flags::systemd_word`]).
    pub fn unit_word(v: &tera::Value) -> String {
        crate::modules::kubexm::flags::systemd_word(&text(v))
    }

    /// The program of a systemd command line: an absolute path of letters, digits and
    /// `/._-+@` (a leading `-`, `@`, `+`, `!` or `:` would be read as a prefix that changes how
    /// it runs, and systemd refuses the whole unit when the program's name holds special
    /// characters, even escaped).
    ///
    /// # Errors
    ///
    /// The path is not absolute, or holds another character.
    pub fn unit_exec(v: &tera::Value) -> tera::TeraResult<String> {
        let t = text(v);
        if !t.starts_with('/')
            || !t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-+@".contains(c))
        {
            return Err(tera::Error::message(format!(
                "`{}` is not an absolute path of letters, digits and /._-+@: a systemd command line starts with its program's",
                t.escape_debug()
            )));
        }
        Ok(t)
    }

    /// A systemd setting's text (not a command line): `%` doubled (specifiers); a control
    /// character, which would end the line, refused.
    ///
    /// # Errors
    ///
    /// The text holds a control character.
    pub fn unit_text(v: &tera::Value) -> tera::TeraResult<String> {
        let t = text(v);
        if let Some(c) = t.chars().find(|c| c.is_control()) {
            return Err(tera::Error::message(format!(
                "`{}` holds the control character {c:?}: a systemd setting's value is one line",
                t.escape_debug()
            )));
        }
        Ok(t.replace('%', "%%"))
    }

    /// One word of a line-based configuration: letters, digits and `._:/@+=,%[]-` only; anything
    /// else (spaces, quotes, `;`, `#`, braces, control characters) would change the line.
    ///
    /// # Errors
    ///
    /// The word holds another character.
    pub fn conf_word(v: &tera::Value) -> tera::TeraResult<String> {
        let t = text(v);
        match t
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "._:/@+=,%[]-*".contains(*c)))
        {
            None if !t.is_empty() => Ok(t),
            found => Err(tera::Error::message(format!(
                "`{}` cannot be one word of this configuration file ({})",
                t.escape_debug(),
                found.map_or_else(|| "it is empty".to_owned(), |c| format!("it holds {c:?}"))
            ))),
        }
    }

    /// A list of [`conf_word`]s joined by spaces (a single value is a list of one).
    ///
    /// # Errors
    ///
    /// One of them is not a plain word.
    pub fn conf_words(v: &tera::Value) -> tera::TeraResult<String> {
        match v.as_array() {
            Some(items) => Ok(items
                .iter()
                .map(conf_word)
                .collect::<tera::TeraResult<Vec<_>>>()?
                .join(" ")),
            None => conf_word(v),
        }
    }

    /// Text in a `#` comment: control characters shown as escapes, so the comment stays one
    /// line.
    pub fn comment(v: &tera::Value) -> String {
        let t = text(v);
        if !t.chars().any(char::is_control) {
            return t;
        }
        t.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect()
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_file_is_embedded_and_parses() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
        let mut on_disk = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("templates dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "tera") {
                    let rel = p.strip_prefix(&dir).expect("prefix");
                    on_disk.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = TEMPLATES.iter().map(|(n, _)| n.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "templates/ and TEMPLATES differ");
        for (name, source) in TEMPLATES {
            let mut t = engine();
            t.add_raw_template(name, source)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn unknown_template_is_named() {
        let err = render("nope.tera", &tera::Context::new()).expect_err("unknown");
        assert!(err.to_string().contains("nope.tera"), "{err}");
    }
}
