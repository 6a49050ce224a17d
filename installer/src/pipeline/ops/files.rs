//! Files on a node: upload, render a template, copy, directories, permissions, tarballs and
//! managed blocks. Every writer keeps the previous content in `DEST.kubexm-orig` until the task
//! succeeds, so a rollback puts the node back as it was.

use std::time::Duration;

use async_trait::async_trait;

use super::generic::{run_ok, run_test, GenericStep, OpPlan};
use crate::pipeline::error::StepError;
use crate::runner::{shell, Runner, Upload, UploadSource};

const BACKUP: &str = ".kubexm-orig";

fn backup_script(dest: &str) -> String {
    let d = shell::quote(dest);
    let o = shell::quote(&format!("{dest}{BACKUP}"));
    format!("if [ -e {d} ] && [ ! -e {o} ]; then cp -a -- {d} {o}; fi")
}

fn restore_script(dest: &str) -> String {
    let d = shell::quote(dest);
    let o = shell::quote(&format!("{dest}{BACKUP}"));
    format!("if [ -e {o} ]; then mv -f -- {o} {d}; else rm -f -- {d}; fi")
}

fn drop_backup_script(dest: &str) -> String {
    format!("rm -f -- {}", shell::quote(&format!("{dest}{BACKUP}")))
}

async fn has_sha256(runner: &dyn Runner, dest: &str, sha256: &str) -> Result<bool, StepError> {
    let out = run_ok(
        runner,
        &shell::remote_sha256(dest),
        Duration::from_secs(120),
    )
    .await?;
    Ok(out.trim() == sha256)
}

/// Uploads a file from the control host (bundle files, certificates), sha256-checked.
#[derive(Debug, Clone)]
pub struct UploadFile {
    /// Content.
    pub source: UploadSource,
    /// Its sha256 (lowercase hex).
    pub sha256: String,
    /// Destination on the node.
    pub dest: String,
    /// Mode.
    pub mode: u32,
}

impl UploadFile {
    /// Bytes in memory (hashes them).
    pub fn bytes(bytes: Vec<u8>, dest: impl Into<String>, mode: u32) -> Self {
        let sha256 = kubexm_bundles::hash::sha256_hex(&bytes);
        Self {
            source: UploadSource::Bytes(bytes),
            sha256,
            dest: dest.into(),
            mode,
        }
    }

    fn source_name(&self) -> String {
        match &self.source {
            UploadSource::File(p) => p.display().to_string(),
            UploadSource::Bytes(b) => format!("<{} bytes>", b.len()),
        }
    }
}

#[async_trait]
impl GenericStep for UploadFile {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "upload",
            detail: format!("{} -> {} ({:o})", self.source_name(), self.dest, self.mode),
            input: Some(format!("sha256:{}", self.sha256)),
        }
    }

    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        has_sha256(runner, &self.dest, &self.sha256).await
    }

    fn written(&self) -> Option<super::generic::Written<'_>> {
        Some(match &self.source {
            UploadSource::Bytes(b) => super::generic::Written::Bytes(std::borrow::Cow::Borrowed(b)),
            UploadSource::File(p) => super::generic::Written::File(p),
        })
    }

    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        run_ok(runner, &backup_script(&self.dest), Duration::from_secs(120)).await?;
        runner
            .upload(&Upload {
                source: self.source.clone(),
                sha256: self.sha256.clone(),
                dest: self.dest.clone(),
                mode: self.mode,
                sudo: true,
            })
            .await?;
        Ok(())
    }

    fn revert(&self) -> Option<String> {
        Some(restore_script(&self.dest))
    }

    fn commit(&self) -> Option<String> {
        Some(drop_backup_script(&self.dest))
    }
}

/// One file of an [`UploadTree`].
#[derive(Debug, Clone)]
pub struct TreeFile {
    /// The file on the control host.
    pub source: std::path::PathBuf,
    /// Its path below the tree's directory (relative, `/`-separated, no `..`).
    pub path: String,
    /// Its sha256 (lowercase hex).
    pub sha256: String,
    /// Its size in bytes (for the plan).
    pub size: u64,
}

/// Many files into one directory that KubeXM owns (a bundle's package repository): checked all
/// at once (`sha256sum -c`), missing or different files uploaded, each sha256-verified; reverted
/// by removing the directory. Directories end up world-readable (apt reads repositories as the
/// unprivileged `_apt` user).
#[derive(Debug, Clone)]
pub struct UploadTree {
    /// The files.
    pub files: Vec<TreeFile>,
    /// The directory on the node.
    pub dest: String,
}

impl UploadTree {
    /// `sha256sum -c` input for the tree: `HEX  PATH` lines, sorted by path.
    fn checklist(&self) -> String {
        let mut lines: Vec<String> = self
            .files
            .iter()
            .map(|f| format!("{}  {}\n", f.sha256, f.path))
            .collect();
        lines.sort();
        lines.concat()
    }

    fn check_script(&self) -> String {
        format!(
            "cd {} 2>/dev/null && printf '%s' {} | sha256sum -c --quiet --strict >/dev/null 2>&1",
            shell::quote(&self.dest),
            shell::quote(&self.checklist())
        )
    }
}

#[async_trait]
impl GenericStep for UploadTree {
    fn plan(&self) -> OpPlan {
        let bytes: u64 = self.files.iter().map(|f| f.size).sum();
        OpPlan {
            kind: "upload-tree",
            detail: format!(
                "{} files ({bytes} bytes) -> {}/",
                self.files.len(),
                self.dest
            ),
            input: Some(format!(
                "sha256:{}",
                kubexm_bundles::hash::sha256_hex(self.checklist().as_bytes())
            )),
        }
    }

    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        run_test(runner, &self.check_script()).await
    }

    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        for f in &self.files {
            // Skipped by the runner when the node already has this content.
            runner
                .upload(&Upload {
                    source: UploadSource::File(f.source.clone()),
                    sha256: f.sha256.clone(),
                    dest: format!("{}/{}", self.dest.trim_end_matches('/'), f.path),
                    mode: 0o644,
                    sudo: true,
                })
                .await?;
        }
        let d = shell::quote(&self.dest);
        run_ok(
            runner,
            &format!("find {d} -type d -exec chmod 0755 {{}} +"),
            Duration::from_secs(120),
        )
        .await
        .map(drop)
    }

    async fn verify(&self, runner: &dyn Runner) -> Result<(), StepError> {
        if run_test(runner, &self.check_script()).await? {
            Ok(())
        } else {
            Err(StepError::Verify(format!(
                "after uploading {} files to {}, `sha256sum -c` still fails",
                self.files.len(),
                self.dest
            )))
        }
    }

    fn revert(&self) -> Option<String> {
        Some(format!("rm -rf -- {}", shell::quote(&self.dest)))
    }
}

/// A template from `templates/` rendered on the control host and written to the node.
#[derive(Debug, Clone)]
pub struct RenderTemplate {
    /// Template name (path under `templates/`).
    pub template: &'static str,
    /// The rendered file, written through [`UploadFile`].
    pub file: UploadFile,
    /// A check: when it exits 0 the file is left as it is, whatever it holds (a file only
    /// needed until something has happened, such as a join configuration whose token changes).
    pub unless: Option<String>,
}

impl RenderTemplate {
    /// Renders `template` with `context`.
    pub fn new(
        template: &'static str,
        context: &tera::Context,
        dest: impl Into<String>,
        mode: u32,
    ) -> Result<Self, StepError> {
        let text = crate::templates::render(template, context)?;
        Ok(Self {
            template,
            file: UploadFile::bytes(text.into_bytes(), dest, mode),
            unless: None,
        })
    }

    /// Leave the file as it is when `check` exits 0.
    #[must_use]
    pub fn unless(mut self, check: impl Into<String>) -> Self {
        self.unless = Some(check.into());
        self
    }

    /// The rendered text.
    pub fn text(&self) -> &[u8] {
        match &self.file.source {
            UploadSource::Bytes(b) => b,
            UploadSource::File(_) => &[],
        }
    }
}

#[async_trait]
impl GenericStep for RenderTemplate {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "template",
            detail: match &self.unless {
                None => format!(
                    "{} -> {} ({:o})",
                    self.template, self.file.dest, self.file.mode
                ),
                Some(u) => format!(
                    "{} -> {} ({:o}) unless: {u}",
                    self.template, self.file.dest, self.file.mode
                ),
            },
            input: Some(format!("sha256:{}", self.file.sha256)),
        }
    }
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        if let Some(check) = &self.unless {
            if run_test(runner, check).await? {
                return Ok(true);
            }
        }
        self.file.is_done(runner).await
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        self.file.apply(runner).await
    }
    fn revert(&self) -> Option<String> {
        self.file.revert()
    }
    fn commit(&self) -> Option<String> {
        self.file.commit()
    }
    fn written(&self) -> Option<super::generic::Written<'_>> {
        self.file.written()
    }
}

/// Copies a file that is already on the node (e.g. from an extracted archive) into place.
#[derive(Debug, Clone)]
pub struct CopyFile {
    /// Source on the node.
    pub src: String,
    /// Destination on the node.
    pub dest: String,
    /// Mode.
    pub mode: u32,
}

#[async_trait]
impl GenericStep for CopyFile {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "copy",
            detail: format!("{} -> {} ({:o})", self.src, self.dest, self.mode),
            input: None,
        }
    }
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        let (s, d) = (shell::quote(&self.src), shell::quote(&self.dest));
        run_test(
            runner,
            &format!(
                "cmp -s -- {s} {d} && [ \"$(stat -c %a -- {d})\" = {:o} ]",
                self.mode
            ),
        )
        .await
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let script = format!(
            "set -e\n{}\nmkdir -p \"$(dirname -- {d})\"\ncp -f -- {s} {d}.kubexm-part\nchmod {m:o} {d}.kubexm-part\nmv -f -- {d}.kubexm-part {d}",
            backup_script(&self.dest),
            s = shell::quote(&self.src),
            d = shell::quote(&self.dest),
            m = self.mode,
        );
        run_ok(runner, &script, Duration::from_secs(300))
            .await
            .map(drop)
    }
    fn revert(&self) -> Option<String> {
        Some(restore_script(&self.dest))
    }
    fn commit(&self) -> Option<String> {
        Some(drop_backup_script(&self.dest))
    }
}

/// Creates a directory (and its parents) with a mode.
#[derive(Debug, Clone)]
pub struct CreateDir {
    /// Path.
    pub path: String,
    /// Mode.
    pub mode: u32,
}

#[async_trait]
impl GenericStep for CreateDir {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "mkdir",
            detail: format!("{} ({:o})", self.path, self.mode),
            input: None,
        }
    }
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        let p = shell::quote(&self.path);
        run_test(
            runner,
            &format!(
                "[ -d {p} ] && [ \"$(stat -c %a -- {p})\" = {:o} ]",
                self.mode
            ),
        )
        .await
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        // Record whether it existed so the revert removes only what this op created.
        let p = shell::quote(&self.path);
        let script = format!(
            "set -e\nif [ ! -d {p} ]; then mkdir -p -- {p}; : > {p}/.kubexm-created; fi\nchmod {:o} {p}",
            self.mode
        );
        run_ok(runner, &script, Duration::from_secs(60))
            .await
            .map(drop)
    }
    fn revert(&self) -> Option<String> {
        let p = shell::quote(&self.path);
        Some(format!(
            "if [ -e {p}/.kubexm-created ]; then rm -f -- {p}/.kubexm-created; rmdir -- {p} 2>/dev/null || true; fi"
        ))
    }
    fn commit(&self) -> Option<String> {
        Some(format!(
            "rm -f -- {}/.kubexm-created",
            shell::quote(&self.path)
        ))
    }
}

/// Sets mode (and optionally owner) of an existing path.
#[derive(Debug, Clone)]
pub struct SetPermission {
    /// Path.
    pub path: String,
    /// Mode.
    pub mode: u32,
    /// `user:group`, when it must change.
    pub owner: Option<String>,
}

#[async_trait]
impl GenericStep for SetPermission {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "chmod",
            detail: format!(
                "{} {:o}{}",
                self.path,
                self.mode,
                self.owner
                    .as_deref()
                    .map(|o| format!(" {o}"))
                    .unwrap_or_default()
            ),
            input: None,
        }
    }
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        let p = shell::quote(&self.path);
        let mut test = format!("[ \"$(stat -c %a -- {p})\" = {:o} ]", self.mode);
        if let Some(owner) = &self.owner {
            test.push_str(&format!(
                " && [ \"$(stat -c %U:%G -- {p})\" = {} ]",
                shell::quote(owner)
            ));
        }
        run_test(runner, &test).await
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let p = shell::quote(&self.path);
        let saved = shell::quote(&format!("{}.kubexm-perm", self.path));
        let mut script = format!(
            "set -e\n[ -e {saved} ] || stat -c '%a %U:%G' -- {p} > {saved}\nchmod {:o} -- {p}",
            self.mode
        );
        if let Some(owner) = &self.owner {
            script.push_str(&format!("\nchown {} -- {p}", shell::quote(owner)));
        }
        run_ok(runner, &script, Duration::from_secs(60))
            .await
            .map(drop)
    }
    fn revert(&self) -> Option<String> {
        let p = shell::quote(&self.path);
        let saved = shell::quote(&format!("{}.kubexm-perm", self.path));
        Some(format!(
            "if [ -e {saved} ]; then read m o < {saved}; chmod \"$m\" -- {p}; chown \"$o\" -- {p}; rm -f -- {saved}; fi"
        ))
    }
    fn commit(&self) -> Option<String> {
        Some(format!(
            "rm -f -- {}",
            shell::quote(&format!("{}.kubexm-perm", self.path))
        ))
    }
}

/// Extracts a tarball already on the node into a directory KubeXM owns (a staging directory
/// such as `/var/lib/kubexm/extract/containerd-1.7.0`); the archive's sha256 is stamped inside so
/// a re-run skips it.
#[derive(Debug, Clone)]
pub struct ExtractTarball {
    /// Archive on the node.
    pub archive: String,
    /// Its sha256.
    pub sha256: String,
    /// Target directory (removed on revert).
    pub dest: String,
}

impl ExtractTarball {
    fn stamp(&self) -> String {
        format!("{}/.kubexm-sha256", self.dest)
    }
}

#[async_trait]
impl GenericStep for ExtractTarball {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "extract",
            detail: format!("{} -> {}/", self.archive, self.dest),
            input: Some(format!("sha256:{}", self.sha256)),
        }
    }
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        run_test(
            runner,
            &format!(
                "[ \"$(cat -- {} 2>/dev/null)\" = {} ]",
                shell::quote(&self.stamp()),
                self.sha256
            ),
        )
        .await
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let d = shell::quote(&self.dest);
        let script = format!(
            "set -e\nrm -rf -- {d}\nmkdir -p -- {d}\ntar -xf {a} -C {d} --no-same-owner\necho {s} > {stamp}",
            a = shell::quote(&self.archive),
            s = self.sha256,
            stamp = shell::quote(&self.stamp()),
        );
        run_ok(runner, &script, Duration::from_secs(600))
            .await
            .map(drop)
    }
    fn revert(&self) -> Option<String> {
        Some(format!("rm -rf -- {}", shell::quote(&self.dest)))
    }
}

/// The start marker of a managed block.
pub const BLOCK_BEGIN: &str = "# BEGIN KubeXM Managed Block";
/// The end marker of a managed block.
pub const BLOCK_END: &str = "# END KubeXM Managed Block";

/// Keeps exactly one `# BEGIN KubeXM Managed Block` … `# END KubeXM Managed Block` section with
/// the given lines in a file, leaving the rest of the file alone.
#[derive(Debug, Clone)]
pub struct ManagedBlock {
    /// The file.
    pub path: String,
    /// Used instead of `path` when `path` does not exist but this does (e.g.
    /// `/etc/chrony/chrony.conf` on Debian, `/etc/chrony.conf` on RHEL).
    pub fallback: Option<String>,
    /// Lines between the markers.
    pub lines: Vec<String>,
}

impl ManagedBlock {
    /// A block in `path`.
    pub fn new(path: impl Into<String>, lines: Vec<String>) -> Self {
        Self {
            path: path.into(),
            fallback: None,
            lines,
        }
    }

    /// Sets `p` to the file to edit.
    fn pick(&self) -> String {
        let p = shell::quote(&self.path);
        match &self.fallback {
            Some(f) => format!(
                "p={p}; if [ ! -e \"$p\" ] && [ -e {f} ]; then p={f}; fi",
                f = shell::quote(f)
            ),
            None => format!("p={p}"),
        }
    }

    fn strip_block() -> String {
        format!(
            "awk -v b={b} -v e={e} '$0==b{{skip=1;next}} $0==e{{skip=0;next}} !skip' \"$p\"",
            b = shell::quote(BLOCK_BEGIN),
            e = shell::quote(BLOCK_END),
        )
    }

    fn block_text(&self) -> String {
        let mut text = format!("{BLOCK_BEGIN}\n");
        for l in &self.lines {
            text.push_str(l);
            text.push('\n');
        }
        text.push_str(BLOCK_END);
        text.push('\n');
        text
    }

    /// Writes `body` (a shell snippet printing the new content) over "$p" atomically, keeping
    /// its mode and owner (or 0644 for a new file).
    fn rewrite(&self, body: &str) -> String {
        format!(
            "set -e\n{}\nt=\"$p.kubexm-part\"\n{{\n{body}\n}} > \"$t\"\nif [ -e \"$p\" ]; then chmod --reference=\"$p\" \"$t\"; chown --reference=\"$p\" \"$t\"; else chmod 644 \"$t\"; fi\nmv -f -- \"$t\" \"$p\"",
            self.pick()
        )
    }

    fn display_path(&self) -> String {
        match &self.fallback {
            Some(f) => format!("{} (or {f})", self.path),
            None => self.path.clone(),
        }
    }
}

#[async_trait]
impl GenericStep for ManagedBlock {
    fn plan(&self) -> OpPlan {
        let mut detail = format!("{}:", self.display_path());
        for l in &self.lines {
            detail.push_str("\n  ");
            detail.push_str(l);
        }
        OpPlan {
            kind: "block",
            detail,
            input: None,
        }
    }
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        let current = run_ok(
            runner,
            &format!(
                "{}\n[ -e \"$p\" ] || exit 0\nawk -v b={b} -v e={e} '$0==b{{on=1}} on{{print}} $0==e{{on=0}}' \"$p\"",
                self.pick(),
                b = shell::quote(BLOCK_BEGIN),
                e = shell::quote(BLOCK_END)
            ),
            Duration::from_secs(60),
        )
        .await?;
        Ok(current == self.block_text())
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        // Heredoc with a quoted delimiter: the block is written literally.
        let body = format!(
            "if [ -e \"$p\" ]; then {strip}; fi\ncat <<'KUBEXM_BLOCK_EOF'\n{block}KUBEXM_BLOCK_EOF",
            strip = Self::strip_block(),
            block = self.block_text()
        );
        run_ok(runner, &self.rewrite(&body), Duration::from_secs(60))
            .await
            .map(drop)
    }
    fn revert(&self) -> Option<String> {
        Some(format!(
            "{}\nif [ -e \"$p\" ]; then\n{}\nfi",
            self.pick(),
            self.rewrite(&Self::strip_block())
        ))
    }
}
