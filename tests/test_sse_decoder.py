"""The event-stream decoder shared by streamed model replies and MCP over HTTP."""

from __future__ import annotations

import pytest

from toolnexus._model.sse_reader import SSEDecoder, SSEEvent, iter_events


def decode(*chunks: bytes) -> list[SSEEvent]:
    return list(iter_events(chunks))


def test_a_blank_line_dispatches_an_event_with_its_fields():
    assert decode(b"event: add\ndata: {\"a\": 1}\nid: 7\n\n") == [SSEEvent(event="add", data='{"a": 1}', id="7")]


def test_an_event_without_a_name_is_a_message():
    assert decode(b"data: hi\n\n") == [SSEEvent(data="hi")]


def test_data_lines_join_with_newlines():
    assert decode(b"data: one\ndata:two\ndata\n\n")[0].data == "one\ntwo\n"


def test_only_one_leading_space_of_a_value_is_dropped():
    assert decode(b"data:  two spaces\n\n")[0].data == " two spaces"


@pytest.mark.parametrize("ending", [b"\r\n", b"\n", b"\r"])
def test_every_line_ending_frames_events(ending):
    stream = b"data: a" + ending + ending + b"data: b" + ending + ending
    assert [e.data for e in decode(stream)] == ["a", "b"]


def test_a_crlf_split_between_chunks_is_one_line_end():
    assert [e.data for e in decode(b"data: a\r", b"\ndata: b\r", b"\n\r\n")] == ["a\nb"]


def test_an_event_split_anywhere_between_chunks_arrives_whole():
    stream = "event: x\ndata: h\u00e9llo \u2028 w\u00f6rld\nid: 3\n\n".encode()
    whole = decode(stream)
    for size in (1, 2, 3, 5):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert decode(*chunks) == whole
    assert whole[0].data == "h\u00e9llo \u2028 w\u00f6rld"


def test_comments_are_counted_and_never_dispatched():
    decoder = SSEDecoder()
    assert decoder.feed(b": keep-alive\n\n: again\n") == []
    assert decoder.comments == 2


def test_the_last_event_id_carries_over_and_a_nul_id_is_ignored():
    events = decode(b"id: 1\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\n")
    assert [e.id for e in events] == ["1", "1", "1"]


def test_an_event_with_no_data_still_sets_the_id():
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 9\n\n") == []
    assert decoder.last_event_id == "9"


def test_retry_takes_digits_only():
    assert [e.retry for e in decode(b"retry: 150\ndata: a\n\nretry: 1e3\ndata: b\n\n")] == [150, None]


def test_a_stream_cut_in_the_middle_of_an_event_is_partial_and_not_dispatched():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: whole\n\ndata: half") == [SSEEvent(data="whole")]
    assert decoder.close() == []
    assert decoder.partial


def test_a_stream_that_ends_between_events_is_not_partial():
    decoder = SSEDecoder()
    decoder.feed(b"data: whole\n\n")
    decoder.close()
    assert not decoder.partial


def test_a_byte_order_mark_at_the_start_is_dropped():
    assert decode(b"\xef\xbb\xbfdata: a\n\n")[0].data == "a"


def test_invalid_utf8_is_replaced_not_raised():
    assert decode(b"data: \xff\n\n")[0].data == "\ufffd"
