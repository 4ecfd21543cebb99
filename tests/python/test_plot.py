"""kiln.plot_warmup: the hand-written SVG (always) and matplotlib's PNG/SVG (when it
imports) are valid files with the expected content."""

import xml.etree.ElementTree as ET

import pytest

import kiln

SVG = "{http://www.w3.org/2000/svg}"
TIMES = [0.012, 0.011, 0.4, 0.003, 0.0029, 0.0031] * 5  # seconds per iteration


def test_svg_fallback_is_valid_xml(tmp_path):
    path = kiln.plot_warmup(TIMES, events=[2, (17, "recompile <b>")], backend="svg",
                            path=tmp_path / "w.svg", title="warmup & replay")
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    assert len(root.findall(f".//{SVG}circle[@class='point']")) == len(TIMES)
    events = root.findall(f".//{SVG}g[@class='event']")
    assert [e.find(f"{SVG}text").text for e in events] == ["compile", "recompile <b>"]
    assert root.findall(f".//{SVG}g[@class='ytick']") and root.findall(f".//{SVG}g[@class='xtick']")
    texts = {t.text for t in root.iter(SVG + "text")}
    assert "iteration" in texts and "warmup & replay" in texts


def test_svg_fallback_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_PLOT_BACKEND", "svg")
    path = kiln.plot_warmup([0.001], path=str(tmp_path / "one.svg"))
    root = ET.parse(path).getroot()
    assert len(root.findall(f".//{SVG}circle")) == 1


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        kiln.plot_warmup([], path=tmp_path / "x.svg")
    with pytest.raises(ValueError):
        kiln.plot_warmup([1.0], path=tmp_path / "x.png", backend="svg")
    with pytest.raises(ValueError):
        kiln.plot_warmup([1.0], path=tmp_path / "x.svg", unit="s")


def test_matplotlib_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib")
    png = kiln.plot_warmup(TIMES, events=[(2, "compile")], path=tmp_path / "w.png",
                           backend="matplotlib")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    svg = kiln.plot_warmup(TIMES, events=[2], path=tmp_path / "w.svg", backend="matplotlib")
    assert ET.parse(svg).getroot().tag == SVG + "svg"
