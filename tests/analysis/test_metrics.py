"""The metrics of labkit.analysis.metrics on a hand-made rollout frame, against hand arithmetic.

The frame below is three turns of one rollout, on round clock readings (seconds):

turn 0  send 10.0  build 10.0-10.1  validation 10.1-10.2 (api)  queue 10.2-10.3
        prefill 10.3-10.5  decode 10.5-11.0  first_delta 10.6  last_delta 11.0
        billing 11.0-11.1 (api)  done 11.2  tool 11.3-11.8
turn 1  send 12.0  build 12.0-12.2  queue 12.3-12.4  prefill 12.4-12.5
        decode 12.5-13.5  first_delta 12.7  last_delta 13.5  done 13.6  tool 13.7-14.7
turn 2  send 15.0  build 15.0-15.1  validation 15.1-15.2 (api)  queue 15.2-15.3
        prefill 15.3-15.4  decode 15.4-16.4  first_delta 15.5  last_delta 16.4  done 16.5
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from labkit.analysis.metrics import end_to_end, summary, turns
from labkit.api.stages import CLIENT_INSTANTS, CLIENT_STAGES, INFERENCE_STAGES, bucket_of
from labkit.client.frame import COLUMNS

# (turn, stage, source, start, end, tokens); client instants have end == start.
SPANS: list[tuple[int, str, str, float, float, int]] = [
    (0, "send", "client", 10.0, 10.0, 0),
    (0, "build", "client", 10.0, 10.1, 0),
    (0, "validation", "server", 10.1, 10.2, 0),
    (0, "queue", "server", 10.2, 10.3, 0),
    (0, "prefill", "server", 10.3, 10.5, 400),
    (0, "decode", "server", 10.5, 11.0, 50),
    (0, "first_delta", "client", 10.6, 10.6, 0),
    (0, "last_delta", "client", 11.0, 11.0, 0),
    (0, "billing", "server", 11.0, 11.1, 0),
    (0, "done", "client", 11.2, 11.2, 50),
    (0, "tool", "client", 11.3, 11.8, 0),
    (1, "send", "client", 12.0, 12.0, 0),
    (1, "build", "client", 12.0, 12.2, 0),
    (1, "queue", "server", 12.3, 12.4, 0),
    (1, "prefill", "server", 12.4, 12.5, 100),
    (1, "decode", "server", 12.5, 13.5, 100),
    (1, "first_delta", "client", 12.7, 12.7, 0),
    (1, "last_delta", "client", 13.5, 13.5, 0),
    (1, "done", "client", 13.6, 13.6, 100),
    (1, "tool", "client", 13.7, 14.7, 0),
    (2, "send", "client", 15.0, 15.0, 0),
    (2, "build", "client", 15.0, 15.1, 0),
    (2, "validation", "server", 15.1, 15.2, 0),
    (2, "queue", "server", 15.2, 15.3, 0),
    (2, "prefill", "server", 15.3, 15.4, 100),
    (2, "decode", "server", 15.4, 16.4, 100),
    (2, "first_delta", "client", 15.5, 15.5, 0),
    (2, "last_delta", "client", 16.4, 16.4, 0),
    (2, "done", "client", 16.5, 16.5, 100),
]

# The buckets written by hand, to check bucket_of against.
HAND_BUCKETS = {
    "send": "client",
    "first_delta": "client",
    "last_delta": "client",
    "done": "client",
    "build": "client",
    "tool": "client",
    "queue": "inference",
    "prefill": "inference",
    "decode": "inference",
    "validation": "api",
    "billing": "api",
    "uplink": "api",
    "storage": "api",
}


def make_frame(spans: list[tuple[int, str, str, float, float, int]] = SPANS) -> pd.DataFrame:
    rows: list[dict[str, Any]] = [
        {
            "design": "naive",
            "turn": turn,
            "stage": stage,
            "bucket": HAND_BUCKETS[stage],
            "source": source,
            "start": start,
            "duration": end - start,
            "items": 0,
            "tokens": tokens,
            "detail": {},
            "response_id": f"resp_{turn}",
        }
        for turn, stage, source, start, end, tokens in spans
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def test_bucket_of_agrees_with_the_hand_buckets() -> None:
    for stage, bucket in HAND_BUCKETS.items():
        assert bucket_of(stage) == bucket, stage
    assert all(bucket_of(s) == "inference" for s in INFERENCE_STAGES)
    assert all(bucket_of(s) == "client" for s in (*CLIENT_STAGES, *CLIENT_INSTANTS))
    frame = make_frame()
    assert frame["bucket"].tolist() == frame["stage"].map(bucket_of).tolist()
    # Client instants are rows of duration 0.
    assert (frame.loc[frame["stage"].isin(CLIENT_INSTANTS), "duration"] == 0).all()


def test_turns_per_turn_figures() -> None:
    table = turns(make_frame())
    assert list(table.index) == [0, 1, 2]
    assert list(table.columns) == ["wall", "ttft", "inference", "client", "api"]
    # wall: send to the next send; the last turn, send to done.
    #   turn 0: 12.0 - 10.0 = 2.0;  turn 1: 15.0 - 12.0 = 3.0;  turn 2: 16.5 - 15.0 = 1.5
    assert table["wall"].tolist() == pytest.approx([2.0, 3.0, 1.5])
    # ttft: send to first_delta.
    #   turn 0: 10.6 - 10.0 = 0.6;  turn 1: 12.7 - 12.0 = 0.7;  turn 2: 15.5 - 15.0 = 0.5
    assert table["ttft"].tolist() == pytest.approx([0.6, 0.7, 0.5])
    # inference: queue + prefill + decode.
    #   turn 0: 0.1 + 0.2 + 0.5 = 0.8;  turn 1: 0.1 + 0.1 + 1.0 = 1.2;  turn 2: 0.1 + 0.1 + 1.0 = 1.2
    assert table["inference"].tolist() == pytest.approx([0.8, 1.2, 1.2])
    # client: build + tool.
    #   turn 0: 0.1 + 0.5 = 0.6;  turn 1: 0.2 + 1.0 = 1.2;  turn 2: 0.1 + 0 = 0.1
    assert table["client"].tolist() == pytest.approx([0.6, 1.2, 0.1])
    # api = wall - inference - client.
    #   turn 0: 2.0 - 0.8 - 0.6 = 0.6;  turn 1: 3.0 - 1.2 - 1.2 = 0.6;  turn 2: 1.5 - 1.2 - 0.1 = 0.2
    assert table["api"].tolist() == pytest.approx([0.6, 0.6, 0.2])


def test_api_is_the_residual_not_the_sum_of_api_spans() -> None:
    frame = make_frame()
    table = turns(frame)
    api_spans = frame[frame["bucket"] == "api"].groupby("turn")["duration"].sum()
    # turn 0's api spans: validation 0.1 + billing 0.1 = 0.2, but its api time is 0.6:
    # the uplink, downlink and everything the server did not trace count as api too.
    assert api_spans[0] == pytest.approx(0.2)
    assert table.loc[0, "api"] == pytest.approx(0.6)
    # turn 1 has no api span at all, yet 0.6 s of api time.
    assert 1 not in api_spans.index
    assert table.loc[1, "api"] == pytest.approx(0.6)


def test_walls_add_up_to_end_to_end() -> None:
    frame = make_frame()
    # first send 10.0 to the last done 16.5
    assert end_to_end(frame) == pytest.approx(6.5)
    # 2.0 + 3.0 + 1.5 = 6.5
    assert turns(frame)["wall"].sum() == pytest.approx(end_to_end(frame))


def test_summary() -> None:
    result = summary(make_frame())
    assert set(result) == {"e2e_s", "ttft_mean_s", "api_share", "turns"}
    # e2e: 16.5 - 10.0 = 6.5
    assert result["e2e_s"] == pytest.approx(6.5)
    # mean TTFT: (0.6 + 0.7 + 0.5) / 3 = 0.6
    assert result["ttft_mean_s"] == pytest.approx(0.6)
    # api share: (0.6 + 0.6 + 0.2) / 6.5 = 1.4 / 6.5
    assert result["api_share"] == pytest.approx(1.4 / 6.5)
    assert result["turns"] == 3


def test_row_order_does_not_matter() -> None:
    frame = make_frame()
    shuffled = frame.sample(frac=1.0, random_state=7).reset_index(drop=True)
    pd.testing.assert_frame_equal(turns(shuffled), turns(frame))
    assert summary(shuffled) == pytest.approx(summary(frame))


def test_a_turn_without_first_delta_has_no_ttft_and_is_left_out_of_the_mean() -> None:
    # turn 1 receives no delta at all (no first_delta, no last_delta rows).
    spans = [s for s in SPANS if not (s[0] == 1 and s[1] in ("first_delta", "last_delta"))]
    frame = make_frame(spans)
    table = turns(frame)
    assert math.isnan(table.loc[1, "ttft"])
    assert table.loc[0, "ttft"] == pytest.approx(0.6)
    assert table.loc[2, "ttft"] == pytest.approx(0.5)
    # The other figures of turn 1 are unchanged: wall 3.0, api 3.0 - 1.2 - 1.2 = 0.6.
    assert table.loc[1, "wall"] == pytest.approx(3.0)
    assert table.loc[1, "api"] == pytest.approx(0.6)
    # The mean skips the missing TTFT: (0.6 + 0.5) / 2 = 0.55.
    result = summary(frame)
    assert result["ttft_mean_s"] == pytest.approx(0.55)
    assert result["turns"] == 3


def test_single_turn_with_no_inference_rows() -> None:
    # One turn that only the client and the API saw: send 1.0, uplink 1.0-1.5 (api), done 2.0.
    spans = [
        (0, "send", "client", 1.0, 1.0, 0),
        (0, "uplink", "server", 1.0, 1.5, 0),
        (0, "done", "client", 2.0, 2.0, 0),
    ]
    frame = make_frame(spans)
    table = turns(frame)
    # wall: 2.0 - 1.0 = 1.0; no inference, no client stage; api: 1.0 - 0 - 0 = 1.0
    assert table.loc[0, "wall"] == pytest.approx(1.0)
    assert table.loc[0, "inference"] == 0.0
    assert table.loc[0, "client"] == 0.0
    assert table.loc[0, "api"] == pytest.approx(1.0)
    assert math.isnan(table.loc[0, "ttft"])
    result = summary(frame)
    assert result["e2e_s"] == pytest.approx(1.0)
    assert result["api_share"] == pytest.approx(1.0)
    assert result["turns"] == 1


def _watched_frame(last_watch: tuple[float, float]) -> pd.DataFrame:
    """The hand rollout, watched: a redraw between turns 0 and 1, and one after the last turn."""
    frame = make_frame()
    watch = [(0, 11.85, 11.95), (2, *last_watch)]
    rows = [
        {
            **frame.iloc[0].to_dict(),
            "turn": t,
            "stage": "observe",
            "bucket": "observer",
            "start": a,
            "duration": b - a,
        }
        for t, a, b in watch
    ]
    return pd.concat([frame, pd.DataFrame(rows, columns=COLUMNS)], ignore_index=True)


def test_watching_between_turns_is_left_out_and_after_the_end_takes_nothing() -> None:
    frame = _watched_frame((16.6, 17.4))  # the last redraw came after the last answer
    table = turns(frame)
    assert table.loc[0, "wall"] == pytest.approx(2.0 - 0.1)  # 10.0 to 12.0, less the redraw
    assert table.loc[2, "wall"] == pytest.approx(1.5)  # 15.0 to 16.5: the late redraw is outside it
    assert table.loc[2, "api"] == pytest.approx(1.5 - 1.2 - 0.1)  # not less the redraw: never negative
    assert end_to_end(frame) == pytest.approx(6.5 - 0.1)


def test_a_watch_that_straddles_the_end_counts_only_its_part_inside() -> None:
    frame = _watched_frame((16.4, 16.8))
    assert turns(frame).loc[2, "wall"] == pytest.approx(1.5 - 0.1)
    assert end_to_end(frame) == pytest.approx(6.5 - 0.1 - 0.1)
