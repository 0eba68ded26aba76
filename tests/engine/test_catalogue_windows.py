"""Every model of the catalogue has a context window and keeps part of it for the output.

In process, on the real ``models.toml`` and files written to a temporary directory; the command
line's answer to a bad window through ``labkit serve`` itself; the protocol page's table of the
windows against the catalogue (one source: ``models.toml``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.engine.catalogue import BUILTIN_MODELS, DEFAULT_MAX_OUTPUT, DEFAULT_WINDOW, load_catalogue
from tests.helpers import REPO, labkit, one_line_error


def test_the_builtin_windows_are_the_published_ones(no_env_models: None) -> None:
    catalogue = load_catalogue()
    classic, spark, burst = (catalogue.resolve(f"labkit-{n}") for n in ("classic", "spark", "burst"))
    # The GPT-5 family's: 400,000 tokens, up to 128,000 of them output, so 272,000 of input.
    assert (classic.context_window, classic.max_output_tokens, classic.input_limit) == (
        400_000,
        128_000,
        272_000,
    )
    # GPT-5.3-Codex-Spark's 128k, 32,768 kept for the output (labkit's choice), for both speeds.
    assert (spark.context_window, spark.max_output_tokens, spark.input_limit) == (128_000, 32_768, 95_232)
    assert (burst.context_window, burst.max_output_tokens) == (spark.context_window, spark.max_output_tokens)


def test_a_model_file_may_name_a_window_or_take_the_default(no_env_models: None, tmp_path: Path) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text(
        "[models.labkit-spark]\ndecode_tps = 2000\n\n"  # an override keeps the built-in window
        "[models.plain]\ndecode_tps = 300\nprefill_tps = 1e4\n\n"
        "[models.small]\ndecode_tps = 300\nprefill_tps = 1e4\ncontext_window = 8000\n\n"
        "[models.both]\ndecode_tps = 300\nprefill_tps = 1e4\n"
        "context_window = 8000\nmax_output_tokens = 1000\n"
    )
    catalogue = load_catalogue(extra)
    assert catalogue.resolve("labkit-spark").input_limit == 95_232
    plain = catalogue.resolve("plain")
    assert (plain.context_window, plain.max_output_tokens) == (DEFAULT_WINDOW, DEFAULT_MAX_OUTPUT)
    assert catalogue.resolve("small").max_output_tokens == 4000  # half a window under 256k
    assert catalogue.resolve("both").input_limit == 7000


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ("context_window = 0", "context_window = 0"),
        ("context_window = 1.5e5", "context_window = 150000.0"),
        ('max_output_tokens = "lots"', "max_output_tokens = 'lots'"),
        ("context_window = true", "context_window = True"),
        ("context_window = 1000\nmax_output_tokens = 1000", "its input would have no room"),
    ],
)
def test_a_window_that_cannot_be_is_refused_when_the_file_is_read(
    no_env_models: None, tmp_path: Path, fields: str, named: str
) -> None:
    extra = tmp_path / "models.toml"
    extra.write_text(f"[models.mine]\ndecode_tps = 300\nprefill_tps = 1e4\n{fields}\n")
    with pytest.raises(ValueError, match="model 'mine'") as refused:
        load_catalogue(extra)
    assert named in str(refused.value)


def test_labkit_serve_refuses_a_bad_window_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "models.toml"
    bad.write_text("[models.mine]\ndecode_tps = 300\nprefill_tps = 1e4\ncontext_window = -5\n")
    one_line_error(labkit("serve", "--models", str(bad)), "mine", "context_window = -5")


def test_the_protocol_page_lists_every_builtin_window(no_env_models: None) -> None:
    page = (REPO / "docs" / "protocol.md").read_text()
    catalogue = load_catalogue(BUILTIN_MODELS)
    for name in catalogue.names():
        spec = catalogue.resolve(name)
        row = f"| `{name}` | {spec.context_window:,} | {spec.max_output_tokens:,} | {spec.input_limit:,} |"
        assert row in page, row


def test_the_models_file_is_where_the_windows_come_from() -> None:
    assert BUILTIN_MODELS == REPO / "labkit" / "engine" / "models.toml"
    text = BUILTIN_MODELS.read_text()
    assert text.count("context_window = ") == text.count("[models.") == 3
