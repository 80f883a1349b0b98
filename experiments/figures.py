"""figures.py: the charts of the report (report.py) and the K sweep, as SVG written with the
standard library: learning curves with their 95% bands (curves_svg), gold against proxy over
sqrt(KL to the SFT policy) (overopt_svg), and the updates to hold a share of the gap against K
(thresholds_svg). The README's figure is the first look's own (landing.draw).
"""
import math
from html import escape

from experiments import stats

# One colour per method, the same in every chart and table.
COLOURS = {"sft": "#7f7f7f", "ppo_scalar": "#e08a1e", "text2grad": "#1f6fb4", "text2grad_last": "#6fa8dc",
           "text2grad_no_cot": "#8e5bb5",
           "oracle_scalar": "#b5892f", "oracle": "#2f9e44"}
LABELS = {"sft": "SFT policy", "ppo_scalar": "scalar PPO", "text2grad": "Text2Grad", "text2grad_last":
          "Text2Grad's model, summed on the last token", "text2grad_no_cot":
          "Text2Grad, no critique", "oracle_scalar": "critic, summed on the last token", "oracle": "critic's spans"}
PALETTE = ("#222222", "#c2185b", "#00838f", "#9e9d24")  # not the methods' colours
def colour(name, names):
    """A method's own colour; any other series (an SFT metric) one of PALETTE by its place in names."""
    return COLOURS.get(name) or PALETTE[names.index(name) % len(PALETTE)]



def frame(x0, x1, ys, width, height, standalone, label):
    """What the line charts share: the x range [x0, x1], a y range padded 5% around the values ys, the
    margins (a legend's room under a stand-alone chart), the <svg> opening (aria-label `label`, already
    escaped) and the plot's box. Returns (X, Y, y0, y1, parts, (left, right, top, bottom)), X and Y
    mapping data to pixels."""
    y0, y1 = min(ys), max(ys)
    pad = max(1e-3, 0.05 * (y1 - y0))
    y0, y1 = y0 - pad, y1 + pad
    left, right, top, bottom = 56, 16, 12, 62 if standalone else 40
    X = lambda u: left + (u - x0) / (x1 - x0) * (width - left - right)
    Y = lambda v: top + (y1 - v) / (y1 - y0) * (height - top - bottom)
    font = ' font-family="sans-serif" font-size="12"' if standalone else ""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"{font} '
             f'role="img" aria-label="{label}">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>'
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
             f'fill="none" stroke="#ccc"/>']
    return X, Y, y0, y1, parts, (left, right, top, bottom)


def legend_under(names, left, right, width, height):
    """A stand-alone chart's legend, one swatch and label per series along its bottom edge."""
    parts = []
    for k, n in enumerate(names):
        x = left + k * (width - left - right) / max(1, len(names))
        parts.append(f'<line x1="{x:.1f}" x2="{x + 20:.1f}" y1="{height - 10}" y2="{height - 10}" '
                     f'stroke="{colour(n, names)}" stroke-width="2"/><text x="{x + 24:.1f}" y="{height - 6}">'
                     f'{LABELS.get(n, escape(n))}</text>')
    return parts


def curves_svg(methods, metric, width=640, height=300, x_label="PPO update", standalone=False):
    """Mean curve per series (a PPO method, or an SFT metric) with its 95% band; one <polyline
    class="curve"> each. methods:
    {name: {"curve": [[update, value]], "curve_ci95": [[update, half-width]]}}; metric names the y axis,
    x_label the x axis. standalone: an SVG file of its own (fonts, and the legend under the plot);
    otherwise a chart for the report, which writes the legend beside it in HTML."""
    names = [n for n in methods if n != "sft" and len(methods[n]["curve"]) > 0]
    points = {n: [(u, m, h) for (u, m), (_, h) in zip(methods[n]["curve"], methods[n]["curve_ci95"])] for n in names}
    xs = [u for n in names for u, _, _ in points[n]]
    lows = [m - h for n in names for _, m, h in points[n]]
    highs = [m + h for n in names for _, m, h in points[n]]
    if not xs:
        return '<p class="note">no curves in this results.json</p>'
    X, Y, y0, y1, parts, (left, right, top, bottom) = frame(
        min(xs), max(max(xs), min(xs) + 1), lows + highs, width, height, standalone,
        f"{escape(metric)} against {escape(x_label)}")
    for k in range(5):  # y grid and labels
        v = y0 + (y1 - y0) * k / 4
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>'
                     f'<text x="{left - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
    for u in sorted(set(xs)):
        parts.append(f'<text x="{X(u):.1f}" y="{height - bottom + 16}" text-anchor="middle">{u}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - bottom + 34}" text-anchor="middle">'
                 f'{escape(x_label)}</text>')
    for n in names:
        stroke, p = colour(n, names), points[n]
        band = [(X(u), Y(m + h)) for u, m, h in p] + [(X(u), Y(m - h)) for u, m, h in reversed(p)]
        parts.append(f'<polygon class="band" points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in band)}" '
                     f'fill="{stroke}" fill-opacity="0.15" stroke="none"/>')
    for n in names:
        stroke, p = colour(n, names), points[n]
        parts.append(f'<polyline class="curve" data-method="{escape(n)}" fill="none" stroke="{stroke}" '
                     f'stroke-width="2" points="{" ".join(f"{X(u):.1f},{Y(m):.1f}" for u, m, _ in p)}"/>')
        for u, m, h in p:
            parts.append(f'<circle cx="{X(u):.1f}" cy="{Y(m):.1f}" r="3" fill="{stroke}"><title>'
                         f'{LABELS.get(n, escape(n))}, {escape(x_label)} {u}: {m:.4f} ± {h:.4f}</title></circle>')
    if standalone:
        parts += legend_under(names, left, right, width, height)
    parts.append("</svg>")
    return "".join(parts)


def overopt_svg(methods, title="", width=640, height=300, standalone=False):
    """Gold and proxy against sqrt(KL to the SFT policy), the picture of over-optimisation (Gao et al.
    2023): per method (in its colour) the critic's score, a solid line (<polyline class="gold">), and
    what the method's own judge says, dashed (class="proxy"; the oracle methods' proxy is the gold
    and is not drawn twice). methods: {name: {"overopt": [{"update", "sqrt_kl", "gold", "proxy"}]}},
    each point a mean over seeds. A proxy that keeps rising while the gold turns is a reward being gamed."""
    names = [n for n in methods if methods[n].get("overopt")]
    if not names:
        return '<p class="note">no over-optimisation measurement in this results.json</p>'
    judged = lambda n: COLOURS.get(n) and not n.startswith("oracle")
    xs = [p["sqrt_kl"] for n in names for p in methods[n]["overopt"]]
    ys = [p[key] for n in names for p in methods[n]["overopt"] for key in (("gold", "proxy") if judged(n) else ("gold",))]
    x0, x1 = 0.0, max(max(xs), 1e-3)
    X, Y, y0, y1, parts, (left, right, top, bottom) = frame(
        x0, x1, ys, width, height, standalone, f"gold and proxy reward against the square root of KL {escape(title)}")
    for k in range(5):
        v, u = y0 + (y1 - y0) * k / 4, x0 + (x1 - x0) * k / 4
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>'
                     f'<text x="{left - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>'
                     f'<text x="{X(u):.1f}" y="{height - bottom + 16}" text-anchor="middle">{u:.2f}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - bottom + 34}" text-anchor="middle">'
                 f'sqrt(KL to the SFT policy), nats; solid: the critic (gold), dashed: the method\'s own reward '
                 f'(proxy) {escape(title)}</text>')
    for n in names:
        stroke, points = colour(n, names), methods[n]["overopt"]
        for key in ("gold", "proxy") if judged(n) else ("gold",):
            dash = ' stroke-dasharray="6 4"' if key == "proxy" else ""
            xy = [(X(p["sqrt_kl"]), Y(p[key]), p) for p in points]
            parts.append(f'<polyline class="{key}" data-method="{escape(n)}" fill="none" stroke="{stroke}" '
                         f'stroke-width="2"{dash} points="{" ".join(f"{a:.1f},{b:.1f}" for a, b, _ in xy)}"/>')
            for a, b, p in xy:
                parts.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2" fill="{stroke}"><title>'
                             f'{LABELS.get(n, escape(n))}, update {p["update"]}: {key} {p[key]:.3f}, '
                             f'sqrt(KL) {p["sqrt_kl"]:.3f}</title></circle>')
    if standalone:
        parts += legend_under(names, left, right, width, height)
    parts.append("</svg>")
    return "".join(parts)


def sft_curve_series(results):
    """{metric: curves_svg series} from the SFT stage's learning curve (no band: one run)."""
    curve = results.get("sft_training", {}).get("curve", [])
    return {k: {"curve": [[step, m[k]] for step, m in curve], "curve_ci95": [[step, 0.0] for step, _ in curve]}
            for k in (curve[0][1] if curve else {})}


def thresholds_svg(per_k, q, width=700, height=300):
    """Mean updates to close q of the gap from SFT to the ceiling and hold it to the end of the budget
    (sweep.thresholds) against K (K on a log2 axis), one
    line per method, each point with its 95% interval over seeds; <polyline class="threshold"> each.
    A stand-alone SVG (fonts and legend inside it), so the sweep also writes it to a file."""
    ks = sorted(per_k, key=int)
    names = [n for n in per_k[ks[0]]["thresholds"]]
    points = {n: [(k, *stats.mean_ci95(per_k[k]["thresholds"][n][q]["per_seed"])) for k in ks] for n in names}
    step = max(1, math.ceil(max(m + h for n in names for _, m, h in points[n]) / 4))  # 4 whole-update grid steps
    y1 = 4 * step
    left, right, top, bottom = 56, 250, 12, 40  # the legend sits on the right
    X = lambda k: left + (ks.index(k) + 0.5) / len(ks) * (width - left - right)
    Y = lambda v: top + (y1 - v) / y1 * (height - top - bottom)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'font-family="system-ui, sans-serif" font-size="12" '
             f'aria-label="updates to close {float(q):.0%} of the gap and hold it, against K">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>'
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" fill="none" stroke="#ccc"/>']
    for v in range(0, y1 + 1, step):
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#eee"/>'
                     f'<text x="{left - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    for k in ks:
        parts.append(f'<text x="{X(k):.1f}" y="{height - bottom + 16}" text-anchor="middle">{k}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle">K, flaws per response</text>'
                 f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(top + height - bottom) / 2})">PPO updates</text>')
    for offset, n in enumerate(names):
        stroke, dx = COLOURS.get(n, "#000"), (offset - (len(names) - 1) / 2) * 5  # side by side, not on top
        p = [(X(k) + dx, m, h) for k, m, h in points[n]]
        parts.append(f'<polyline class="threshold" data-method="{escape(n)}" fill="none" stroke="{stroke}" stroke-width="2" '
                     f'points="{" ".join(f"{x:.1f},{Y(m):.1f}" for x, m, _ in p)}"/>')
        for (x, m, h), k in zip(p, ks):
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{Y(max(0, m - h)):.1f}" y2="{Y(m + h):.1f}" stroke="{stroke}"/>'
                         f'<circle cx="{x:.1f}" cy="{Y(m):.1f}" r="3" fill="{stroke}"><title>{LABELS.get(n, escape(n))}, '
                         f'K={k}: {m:.1f} ± {h:.1f} updates</title></circle>')
        y = top + 14 + 20 * offset
        parts.append(f'<line x1="{width - right + 14}" x2="{width - right + 34}" y1="{y - 4}" y2="{y - 4}" stroke="{stroke}" '
                     f'stroke-width="2"/><text x="{width - right + 40}" y="{y}">{LABELS.get(n, escape(n))}</text>')
    parts.append("</svg>")
    return "".join(parts)
