"""Checks of pages that headless chromium rendered, for plot_browser_test.sh.

  page_check.py series DOM METRICS.jsonl...   every run's figures are one path each, a command per value
  page_check.py grid DOM SCHEDULE.json...     a segment per instruction of each stage, kinds matching
  page_check.py png FILE W H COLOUR...        a W x H PNG, not blank, each colour drawn

The references are the metrics files and `dstrain schedule --stage-id` JSON, read here with
Python's json; the PNG is decoded with zlib and struct only.
"""
import json
import math
import os
import re
import struct
import sys
import zlib
from html.parser import HTMLParser


class Charts(HTMLParser):
    """The chromium DOM's charts: title, series paths, and grid segments."""

    def __init__(self):
        super().__init__()
        self.charts = []  # {"title": str, "paths": [(name, points_attr, d)]}
        self.segments = []  # (row, kind)
        self._in_svg_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and a.get("class") in ("chart", "grid-chart"):
            self.charts.append({"title": "", "paths": []})
            self._in_svg_title = "pending"
        elif tag == "title" and self._in_svg_title == "pending":
            self._in_svg_title = True
        elif tag == "path" and a.get("class") == "series":
            self.charts[-1]["paths"].append((a["data-name"], int(a["data-points"]), a["d"]))
        elif tag == "rect" and a.get("class") == "segment":
            self.segments.append((int(a["data-row"]), a["data-kind"]))

    def handle_data(self, data):
        if self._in_svg_title is True:
            self.charts[-1]["title"] += data

    def handle_endtag(self, tag):
        if tag == "title" and self._in_svg_title is True:
            self._in_svg_title = False


def parse(dom_path):
    charts = Charts()
    charts.feed(open(dom_path, encoding="utf-8").read())
    return charts


def is_value(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_series(dom_path, metrics_paths):
    charts = parse(dom_path)
    expected = {}  # (run, figure, kind) -> values in the file
    for path in metrics_paths:
        run = os.path.basename(path)
        for line in open(path):
            record = json.loads(line)
            for field, value in record.items():
                if field in ("loss", "val_loss", "lr", "samples_per_sec", "mfu", "tflops", "peak_rss_mb"):
                    key = (run, field, "step")
                    expected[key] = expected.get(key, 0) + is_value(value)
            for entry in record.get("comms", []):
                for figure in ("bytes", "busbw_gbps"):
                    if figure in entry:
                        key = (run, entry["op"], figure)
                        expected[key] = expected.get(key, 0) + is_value(entry[figure])
    drawn = {}
    for chart in charts.charts:
        figure = {"Bytes per collective": "bytes", "Bus bandwidth per collective": "busbw_gbps"}.get(chart["title"], "step")
        for name, points, d in chart["paths"]:
            run, field = name.rsplit(" ", 1)
            key = (run, field, figure)
            assert key not in drawn, f"{key} drawn twice"
            commands = re.findall(r"[ML]-?[0-9.]+ -?[0-9.]+", d)
            assert len(commands) == points, f"{key}: data-points {points}, path has {len(commands)} commands"
            drawn[key] = points
    assert drawn == expected, f"drawn {sorted(drawn.items())}\nexpected {sorted(expected.items())}"
    runs = {key[0] for key in drawn}
    print(f"series OK: {len(drawn)} paths over {len(charts.charts)} charts for runs {sorted(runs)}")


def check_grid(dom_path, schedule_paths):
    charts = parse(dom_path)
    kinds = {"LoadMicroBatch": "Load", "ForwardPass": "Forward", "BackwardPass": "Backward",
             "SendActivation": "Send", "SendGrad": "Send", "RecvActivation": "Recv", "RecvGrad": "Recv",
             "ReduceTiedGrads": "Reduce", "ReduceGrads": "Reduce", "OptimizerStep": "Optimizer"}
    for stage, path in enumerate(schedule_paths):
        schedule = json.load(open(path))
        want = sorted(kinds[i["op"]] for step in schedule["steps"] for i in step)
        got = sorted(kind for row, kind in charts.segments if row == stage)
        assert got == want, f"stage {stage}: segments {got}\nexpected {want}"
    rows = {row for row, _ in charts.segments}
    assert rows == set(range(len(schedule_paths))), f"rows {sorted(rows)}"
    print(f"grid OK: {len(charts.segments)} segments over {len(rows)} stages")


def decode_png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    at, idat = 8, b""
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    assert depth == 8 and colour_type in (2, 6), f"{path}: depth {depth}, colour type {colour_type}"
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    pixels, previous = [], bytearray(stride)
    for y in range(height):
        filter_type = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = row[x - channels] if x >= channels else 0
            up = previous[x]
            up_left = previous[x - channels] if x >= channels else 0
            if filter_type == 1:
                row[x] = (row[x] + left) & 255
            elif filter_type == 2:
                row[x] = (row[x] + up) & 255
            elif filter_type == 3:
                row[x] = (row[x] + (left + up) // 2) & 255
            elif filter_type == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                row[x] = (row[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 255
        pixels.extend(tuple(row[i:i + 3]) for i in range(0, stride, channels))
        previous = row
    return width, height, pixels


def check_png(path, width, height, colours):
    w, h, pixels = decode_png(path)
    assert (w, h) == (width, height), f"{path}: {w}x{h}, expected {width}x{height}"
    counts = {}
    for p in pixels:
        counts[p] = counts.get(p, 0) + 1
    background = max(counts, key=counts.get)
    drawn = len(pixels) - counts[background]
    assert drawn > 0.01 * len(pixels), f"{path}: only {drawn} of {len(pixels)} pixels differ from the background"
    for colour in colours:
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        near = sum(n for p, n in counts.items() if sum(abs(a - b) for a, b in zip(p, rgb)) <= 24)
        assert near >= 50, f"{path}: colour {colour} on {near} pixels"
    print(f"png OK: {path} {w}x{h}, {drawn} drawn pixels, {len(counts)} colours")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "series":
        check_series(args[0], args[1:])
    elif command == "grid":
        check_grid(args[0], args[1:])
    elif command == "png":
        check_png(args[0], int(args[1]), int(args[2]), args[3:])
    else:
        sys.exit(f"unknown check {command}")
