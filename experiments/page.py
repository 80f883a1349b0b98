"""page.py: the HTML pieces the reports are built of: the page's CSS, tokens coloured one <span>
each, tables, numbers, learning curves with their legend. Standard-library HTML only, every text
escaped (experiments/report.py puts them together).
"""
from html import escape

from experiments.figures import COLOURS, LABELS, colour, curves_svg
from landing import delta_colour


CSS = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1040px; margin: 2em auto; padding: 0 1em; color: #222; }
h2 { border-bottom: 2px solid #ddd; margin-top: 2.2em; } h3 { margin-top: 1.6em; }
table { border-collapse: collapse; margin: .6em 0; } td, th { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #555; font-size: 13px; }
.tokens { font: 14px/1.9 ui-monospace, monospace; white-space: pre-wrap; }
.tokens span { border-radius: 2px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .5em .9em; margin: .9em 0; }
.row { display: grid; grid-template-columns: 11em 1fr; gap: .2em .8em; margin: .3em 0; }
.row > .label { color: #555; font-size: 13px; padding-top: .15em; }
.method { border-left: 4px solid; padding-left: .5em; margin: .8em 0 .2em; }
.critique { font-style: italic; color: #333; }
.swatch { display: inline-block; width: 1.1em; height: .9em; vertical-align: middle; border: 1px solid #bbb; }
svg text { font: 12px system-ui, sans-serif; fill: #333; }
"""


# ---------------------------------------------------------------------------------------------
# Small pieces

def tokens(pieces, classes=None, backgrounds=None, titles=None):
    """<div class="tokens"> holding one <span> per token, nothing else: the spans' text joined is
    the response. classes: a CSS class per token; backgrounds: a CSS colour per token."""
    spans = []
    for t, piece in enumerate(pieces):
        attributes = ""
        if classes:
            attributes += f' class="{classes[t]}"'
        if backgrounds:
            attributes += f' style="background:{backgrounds[t]}"'
        if titles:
            attributes += f' title="{escape(titles[t])}"'
        spans.append(f"<span{attributes}>{escape(piece)}</span>")
    return f'<div class="tokens">{"".join(spans)}</div>'


def delta_tokens(pieces, delta):
    """Tokens coloured poor / neutral / good by their delta in {-1, 0, +1}."""
    return tokens(pieces, backgrounds=[delta_colour(d).replace("none", "transparent") for d in delta],
                  titles=[f"delta {int(d):+d}" for d in delta])


def row(label, body):
    return f'<div class="row"><div class="label">{label}</div><div>{body}</div></div>'


def table(header, rows):
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell if cell.startswith("<td") else f"<td>{cell}</td>" for cell in r) + "</tr>"
                   for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def num(x, digits=3):
    return '<td class="num">-</td>' if x is None else f'<td class="num">{x:.{digits}f}</td>'


def curves(methods, metric, x_label="PPO update"):
    """figures.curves_svg with its legend in HTML under it."""
    names = [n for n in methods if n != "sft" and methods[n]["curve"]]
    return curves_svg(methods, metric, x_label=x_label) + (f"<p>{legend(names)}</p>" if names else "")


def legend(names):
    return " ".join(f'<span class="swatch" style="background:{colour(n, names)}"></span> '
                    f'{LABELS.get(n, escape(n))}' for n in names)


def swatch(name):
    return f'<span class="swatch" style="background:{COLOURS.get(name, "#000")}"></span> {LABELS.get(name, escape(name))}'
