#!/usr/bin/env python3
"""Draws a flame graph (SVG) from folded stacks: one "frame;frame;...;leaf COUNT" line each, as
bench/gpu_checks.py writes them (and as Brendan Gregg's stackcollapse scripts or inferno's
collapsers do). Roots at the bottom; each frame's width is its share of the samples; the title
of every box (shown on hover) gives its samples and share. Standard library only.

  bench/flamegraph.py IN.folded[.gz] OUT.svg [--title TEXT] [--min-share 0.002]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
from pathlib import Path

WIDTH = 1200
ROW = 16
FONT = 11
CHAR_WIDTH = FONT * 0.59


class Node:
    __slots__ = ("count", "children")

    def __init__(self):
        self.count = 0
        self.children: dict[str, Node] = {}


def read_folded(path: Path) -> Node:
    root = Node()
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        node = root
        node.count += int(count)
        for frame in stack.split(";"):
            node = node.children.setdefault(frame, Node())
            node.count += int(count)
    return root


def colour(name: str) -> str:
    # Warm colours, stable per name, so the same function has the same colour in every graph.
    h = hashlib.md5(name.encode()).digest()
    return f"rgb({205 + h[0] % 50},{80 + h[1] % 130},{h[2] % 55})"


def draw(root: Node, title: str, min_share: float) -> str:
    total = root.count or 1
    boxes = []
    depth_max = 0

    def walk(node: Node, name: str, x: float, depth: int):
        nonlocal depth_max
        width = WIDTH * node.count / total
        if node.count / total < min_share:
            return
        depth_max = max(depth_max, depth)
        boxes.append((name, x, depth, width, node.count))
        child_x = x
        for child_name, child in sorted(node.children.items()):
            walk(child, child_name, child_x, depth + 1)
            child_x += WIDTH * child.count / total

    walk(root, "all", 0.0, 0)
    height = (depth_max + 1) * ROW + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'font-family="monospace" font-size="{FONT}">',
           f'<rect width="100%" height="100%" fill="#f8f8f8"/>',
           f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14">'
           f'{html.escape(title)} ({total} samples)</text>']
    for name, x, depth, width, count in boxes:
        y = height - (depth + 1) * ROW - 4
        label = name if len(name) * CHAR_WIDTH < width - 4 else name[: max(0, int((width - 4) / CHAR_WIDTH) - 2)] + ".."
        share = 100 * count / total
        out.append(f'<g><title>{html.escape(name)}: {count} samples, {share:.1f} %</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{max(width - 0.5, 0.1):.1f}" height="{ROW - 1}" '
                   f'fill="{colour(name)}" rx="1"/>'
                   + (f'<text x="{x + 2:.1f}" y="{y + ROW - 4}">{html.escape(label)}</text>'
                      if width > 3 * CHAR_WIDTH else "") + "</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folded", type=Path)
    ap.add_argument("svg", type=Path)
    ap.add_argument("--title", default="")
    ap.add_argument("--min-share", type=float, default=0.002,
                    help="leave out frames with less than this share of the samples")
    args = ap.parse_args()
    args.svg.write_text(draw(read_folded(args.folded), args.title or args.folded.stem,
                             args.min_share))


if __name__ == "__main__":
    main()
