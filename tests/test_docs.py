"""The documentation holds together: a README a newcomer can walk, a reference in docs/ that
names every option, and a site that builds with every link and anchor checked."""

import importlib.util
import re
import subprocess
import sys

import pytest

from gpustats.config import OPTIONS
from tests.support.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"


def test_readme_is_short():
    assert len(README.read_text().splitlines()) < 300


def test_readme_links_lead_somewhere():
    text = README.read_text()
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for target in re.findall(r"\]\(([^)]+)\)", text):
        if target.startswith("http"):
            continue
        path, _, anchor = target.partition("#")
        if path:
            assert (REPO_ROOT / path).exists(), target
        else:
            assert anchor in anchors, target


def _anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_option_is_in_the_configuration_table():
    rows = [line for line in (DOCS / "configuration.md").read_text().splitlines()
            if line.startswith("| `--")]
    documented = {re.match(r"\| `(--[a-z-]+)", row).group(1): row for row in rows}
    for option in OPTIONS:
        assert option.flag in documented, f"{option.flag} is missing from docs/configuration.md"
        assert f"`{option.env}`" in documented[option.flag], option.env
    # --config names the file the others may come from, so it is no option of its own.
    assert set(documented) == {o.flag for o in OPTIONS} | {"--config"}, "a flag that is gone"


def test_every_docs_page_is_in_the_site_nav():
    nav = (REPO_ROOT / "mkdocs.yml").read_text()
    for page in DOCS.glob("*.md"):
        assert f": {page.name}" in nav, f"{page.name} is not in mkdocs.yml's nav"


def test_site_builds_strict(tmp_path):
    """`mkdocs build --strict`: a broken link, a missing anchor or a page left out fails."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--site-dir", str(tmp_path / "site")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "billing" / "index.html").exists()


def test_billing_names_the_state_format_the_daemon_writes():
    from gpustats.engine.state_files import FORMAT_VERSION
    text = (DOCS / "billing.md").read_text()
    found = re.findall(r"keys in them; today (\d+)\b", text)
    assert found == [str(FORMAT_VERSION)], found


def test_api_documents_every_key_of_a_tenant_entry():
    """Each key a ``tenants[]`` entry can have (the hand-built snapshot has a tenant of every
    kind) is a row of the API page's table."""
    from gpustats.export.summary import summary_dict
    from tests.support.tenant_snapshot import tenant_snapshot
    section = (DOCS / "api.md").read_text().split("## `tenants[]`", 1)[1].split("\n## ", 1)[0]
    documented = {key for cell in re.findall(r"^\| ([^|]+) \|", section, re.M)
                  for key in re.findall(r"`(\w+)(?:\[\])?`", cell)}
    tenants = summary_dict(tenant_snapshot())["tenants"]
    assert {t["kind"] for t in tenants} == {"service", "session", "job", "process"}
    keys = {key for t in tenants for key in t}
    assert keys <= documented, sorted(keys - documented)
