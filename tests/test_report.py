"""report.html: well-formed, one curve per method and task, tokens that add back up to the
responses, model text escaped; and `python -m experiments.report` rebuilding it without training."""
import json
import re
import os
from html.parser import HTMLParser

import pytest

import text2grad
from experiments import figures, report, summary

VOID = {"meta", "br", "hr", "img", "input", "link", "col", "wbr"}
SVG_EMPTY = {"rect", "line", "polygon", "polyline", "circle", "path"}


class Page(HTMLParser):
    """A strict reading of the page: every tag closed in order; the curves; and, for each
    <div class="tokens">, all its text and the text inside its <span>s."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.stack, self.curves, self.containers, self.tags = [], [], [], []
        self.feed(text)
        self.close()
        assert not self.stack, f"unclosed tags {self.stack}"

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "polyline" and attrs.get("class") == "curve":
            self.curves.append(attrs["data-method"])
        if tag == "div" and attrs.get("class") == "tokens":
            self.containers.append({"all": "", "spans": "", "n_spans": 0})
        if tag == "span" and self.in_tokens():
            self.containers[-1]["n_spans"] += 1
        if tag not in VOID:
            self.stack.append((tag, tag == "div" and attrs.get("class") == "tokens"))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack and self.stack[-1][0] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def in_tokens(self):
        return any(is_tokens for _, is_tokens in self.stack)

    def handle_data(self, data):
        if self.in_tokens():
            self.containers[-1]["all"] += data
            if self.stack[-1][0] == "span":
                self.containers[-1]["spans"] += data


def results_for(task, responses, critique="fine"):
    """A results dict with everything the report reads, for responses given as token pieces."""
    curve = [[0, 0.5], [1, 0.6], [2, 0.7]]
    methods = {"sft": {"score": 0.5, "ci95": 0.0, "scores": [0.5], "curve": [[0, 0.5]], "curve_ci95": [[0, 0.0]]}}
    for name in text2grad.METHODS:
        methods[name] = {"score": 0.7, "ci95": 0.01, "scores": [0.69, 0.71], "curve": curve,
                         "curve_ci95": [[u, 0.02] for u, _ in curve], "time_s": 3.0, "lambda": 0.5,
                         "explained_variance": [0.3, 0.4], "explained_variance_mc": [0.2, 0.3]}

    def side(pieces):
        delta = [(-1, 0, 1)[k % 3] for k in range(len(pieces))]
        return {"response": "".join(pieces), "pieces": pieces, "score": 0.5,
                "critic": {"critique": critique, "delta": delta}, "reward_model": {"critique": critique, "delta": delta}}

    showcase = [{"prompt": "p", "reference": "r", "sft": side(p), "text2grad": side(p[::-1])} for p in responses]
    confusion = [[5, 1, 0], [0, 9, 1], [0, 0, 4]]
    span = {"positive_f1": 0.9, "negative_f1": 0.8, "exact_span_match": 0.7, "confusion": confusion}
    return {"task": task, "preset": "tiny", "seed": 0, "device": "cpu", "methods": methods,
            "showcase": showcase, "lambda_grid": {n: {"0.5": 0.7} for n in text2grad.METHODS},
            "reward_model": {"cot": {**span, "critique_rougeL": 0.5}, "no_cot": span, "scalar": {"score_correlation": 0.9}},
            "alignment": {"unaligned_rate": 0.0, "test": {"records": 2, "spans": 3, "unaligned": 0, "unaligned_rate": 0.0,
                                                          "labelled_token_share": 0.5, "critiques_truncated": 0}}}


def test_page_structure_curves_and_tokens():
    responses = [["Yuki", "'s", " rent", " rose"], ["def", " f", "(x", "):\n", "    return", " x"]]
    page = Page(report.render([results_for("summarize", responses), results_for("qa", responses)]))
    # one curve per PPO method and task
    assert sorted(page.curves) == sorted(list(text2grad.METHODS) * 2)
    # token containers hold nothing but their spans, and join back to the responses, in order:
    # per task, each showcase entry gives SFT (critic, reward model) then Text2Grad (critic, reward model)
    coloured = [c for c in page.containers if c["n_spans"]]
    assert all(c["all"] == c["spans"] for c in coloured)
    per_task = [text for p in responses for text in ["".join(p)] * 2 + ["".join(p[::-1])] * 2]
    assert [c["all"] for c in coloured] == per_task * 2
    assert [c["n_spans"] for c in coloured][:2] == [4, 4]


def test_model_text_is_escaped():
    evil = ["<script>", "alert(1)", "</script>", " & <marquee>m</marquee> \"q\""]
    page_text = report.render([results_for("summarize", [evil], critique="<img src=x onerror=alert(1)>")])
    page = Page(page_text)
    assert "script" not in page.tags and "img" not in page.tags and "marquee" not in page.tags
    assert any(c["all"] == "".join(evil) for c in page.containers)
    assert "&lt;script&gt;" in page_text


def as_run_wrote_it(summary):
    """The results.json a run writes for this summary: per-seed curves, no intervals or verdicts."""
    results = {k: v for k, v in summary.items() if k != "paired"}
    results["methods"] = {name: {**{k: v for k, v in m.items() if k not in ("score", "ci95", "curve", "curve_ci95")},
                                 "curves": [m["curve"]] * len(m["scores"])}
                          for name, m in summary["methods"].items()}
    results["reward_model"] = {name: {**m, "seeds": {"positive_f1": [0.9], "negative_f1": [0.8]} if name != "scalar" else {}}
                               for name, m in summary["reward_model"].items()}
    return {**results, "sft_training": {"curve": []}}


def test_rebuild_from_results_json(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    summary = results_for("code", [["a", "b"]])
    (folder / "results.json").write_text(json.dumps(as_run_wrote_it(summary)))
    report.main(["--out", str(folder)])
    assert Page((folder / "report.html").read_text(encoding="utf-8")).curves == list(text2grad.METHODS)
    written = json.loads((folder / "summary.json").read_text())
    # scores 0.69 and 0.71: mean 0.7, sd 0.02 / sqrt(2), half-width t(1) = 12.706 times sd / sqrt(2) = 0.12706
    assert written["methods"]["text2grad"]["score"] == pytest.approx(0.7)
    assert written["methods"]["text2grad"]["ci95"] == pytest.approx(12.706 * 0.01)
    assert written["paired"]["text2grad - ppo_scalar"] == {"mean": 0.0, "ci95": 0.0, "per_seed": [0.0, 0.0], "units": 2,
                                                           "verdict": "tie", "p": 1.0}
    assert "text2grad - ppo_scalar           +0.000 ± 0.000 (tie)" in capsys.readouterr().out  # the tables printed


@pytest.mark.parametrize("content, message", [(None, "no results.json"), ("{not json", "not valid JSON"),
                                              ('{"task": "qa"}', "not a text2grad results file")])
def test_report_of_a_bad_folder_is_one_line(tmp_path, capsys, content, message):
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    with pytest.raises(SystemExit) as exit:
        report.main(["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and message in err and err.count("\n") == 1
    assert not os.path.exists(tmp_path / "report.html")


def test_paired_differences_are_shown_only_with_two_seeds_or_more():
    results = results_for("qa", [["a"]])
    results["paired"] = {"text2grad - ppo_scalar": {"mean": 0.25, "ci95": 0.0, "per_seed": [0.25], "verdict": "tie"}}
    one = report.paired_table(results)
    assert "need two seeds or more" in one and "0.250" not in one
    results["paired"]["text2grad - ppo_scalar"] = {"mean": 0.25, "ci95": 0.5, "per_seed": [0.0, 0.5], "verdict": "tie"}
    two = report.paired_table(results)
    assert "need two seeds" not in two and "0.250" in two and "+0.000 +0.500" in two


def test_thresholds_chart_places_points_by_hand():
    # two K, one method; updates to 90% per seed: K=1 [6, 6] (mean 6, no spread), K=8 [2, 4] (mean 3,
    # t interval 12.706 * sd sqrt(2) / sqrt(2) = 12.706); the largest top is 15.706, so the grid
    # steps by ceil(15.706 / 4) = 4 updates up to 16
    per_k = {"1": {"thresholds": {"oracle": {"0.9": {"per_seed": [6, 6]}}}},
             "8": {"thresholds": {"oracle": {"0.9": {"per_seed": [2, 4]}}}}}
    svg = figures.thresholds_svg(per_k, "0.9", width=700, height=300)
    page = Page(svg)
    assert page.tags.count("polyline") == 1
    ticks = re.findall(r'text-anchor="end">(\d+)</text>', svg)
    assert ticks == ["0", "4", "8", "12", "16"]
    # the plot spans y = 12 (16 updates) to y = 260 (0): y(m) = 12 + (16 - m) / 16 * 248
    # x: two K in a plot from 56 to 450, at its quarter and three quarters
    circles = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', svg)
    assert [(float(x), float(y)) for x, y in circles] == [(154.5, 12 + 10 / 16 * 248), (351.5, 12 + 13 / 16 * 248)]


def test_standalone_curve_svg_coordinates():
    # one series, (200, 0.5) and (400, 0.7); plot 56..624 wide, 12..238 high (62 below for the legend);
    # the y range is padded by 5% of 0.2: 0.49..0.71. By hand: x 56 and 624; y 12 + 226 * (0.71 - v) / 0.22
    series = {"right_answer": {"curve": [[200, 0.5], [400, 0.7]], "curve_ci95": [[200, 0.0], [400, 0.0]]}}
    svg = figures.curves_svg(series, "validation", x_label="SFT step", standalone=True)
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "<p>" not in svg  # no HTML legend
    assert 'points="56.0,227.7 624.0,22.3"' in svg
    assert ">SFT step</text>" in svg and ">right_answer</text>" in svg  # axis label and legend, inside the SVG


def test_the_area_under_each_validation_curve_is_paired_by_seed():
    # trapezoids by hand over updates 0, 2, 4: (2 * (0.5 + 0.5) / 2 + 2 * (0.5 + 0.8) / 2) / 4 = 0.575;
    # with 0.7 at update 2, 0.675; with 0.9, 0.775: Text2Grad sooner by 0.1 and 0.2 on the two seeds
    results = as_run_wrote_it(results_for("qa", [["a"]]))
    for name in text2grad.METHODS:
        results["methods"][name]["curves"] = [[[0, 0.5], [2, 0.5], [4, 0.8]]] * 2
    results["methods"]["text2grad"]["curves"] = [[[0, 0.5], [2, 0.7], [4, 0.8]], [[0, 0.5], [2, 0.9], [4, 0.8]]]
    area = summary.summarise(results)["area"]
    assert area["text2grad - ppo_scalar"]["per_seed"] == pytest.approx([0.1, 0.2])
    assert area["text2grad - ppo_scalar"]["mean"] == pytest.approx(0.15)
    assert area["oracle - oracle_scalar"]["per_seed"] == pytest.approx([0.0, 0.0])
