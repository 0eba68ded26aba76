"""Stored responses over HTTP: retrieve, delete and input items, ``store=false``, and API keys
(a response belongs to the key that made it).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from labkit.client.launcher import LabkitServer
from tests.helpers import (
    FIVE_ITEMS,
    READ_FILE_TOOL,
    auth_headers,
)
from tests.server.http_helpers import MODEL, error_of, raw_post


@pytest.fixture
def other_client(server: LabkitServer) -> Iterator[OpenAI]:
    """A client with a different API key: a different owner of stored responses."""
    with OpenAI(base_url=server.base_url, api_key="sk-someone-else", max_retries=0) as c:
        yield c


# ---------------------------------------------------------------- 6. retrieve, delete, input items


def test_retrieve_matches_create(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="hi", metadata={"k": "v"})
    got = client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump()


def test_delete_then_404(client: OpenAI, server: LabkitServer) -> None:
    r = client.responses.create(model=MODEL, input="hi")
    assert client.responses.retrieve(r.id).id == r.id
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.retrieve(r.id)
    assert info.value.status_code == 404
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.BadRequestError) as chained:
        client.responses.create(model=MODEL, input="more", previous_response_id=r.id)
    assert chained.value.code == "previous_response_not_found"


def test_delete_body(client: OpenAI, server: LabkitServer) -> None:
    r = client.responses.create(model=MODEL, input="hi")
    resp = httpx.delete(f"{server.base_url}/responses/{r.id}", headers=auth_headers())
    assert resp.status_code == 200
    assert resp.json() == {"id": r.id, "object": "response", "deleted": True}
    err = error_of(httpx.get(f"{server.base_url}/responses/{r.id}", headers=auth_headers()), 404)
    assert r.id in err["message"]


def test_retrieve_unknown_404(client: OpenAI, server: LabkitServer) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_does_not_exist")
    error_of(httpx.get(f"{server.base_url}/responses/resp_nope", headers=auth_headers()), 404)


def test_input_items_order_and_pagination(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input=FIVE_ITEMS)
    asc = client.responses.input_items.list(r.id, order="asc")
    assert [i.role for i in asc.data] == [i["role"] for i in FIVE_ITEMS]
    assert asc.has_more is False
    ids = [i.id for i in asc.data]
    assert len(set(ids)) == 5 and all(ids)
    assert asc.first_id == ids[0] and asc.last_id == ids[-1]

    desc = client.responses.input_items.list(r.id)  # default order: newest first
    assert [i.id for i in desc.data] == ids[::-1]
    assert desc.first_id == ids[-1] and desc.last_id == ids[0]
    assert [i.id for i in client.responses.input_items.list(r.id, order="desc").data] == ids[::-1]

    page1 = client.responses.input_items.list(r.id, order="asc", limit=2)
    assert [i.id for i in page1.data] == ids[:2]
    assert page1.has_more is True
    assert (page1.first_id, page1.last_id) == (ids[0], ids[1])
    page2 = client.responses.input_items.list(r.id, order="asc", limit=2, after=page1.last_id)
    assert [i.id for i in page2.data] == ids[2:4] and page2.has_more is True
    page3 = client.responses.input_items.list(r.id, order="asc", limit=2, after=page2.last_id)
    assert [i.id for i in page3.data] == ids[4:] and page3.has_more is False
    assert page3.first_id == page3.last_id == ids[4]

    back = client.responses.input_items.list(r.id, order="desc", limit=3, after=ids[3])
    assert [i.id for i in back.data] == ids[2::-1] and back.has_more is False

    # the SDK's own auto-pagination follows `after` to the end
    assert [i.id for i in client.responses.input_items.list(r.id, order="asc", limit=2)] == ids
    assert [i.id for i in client.responses.input_items.list(r.id, limit=1)] == ids[::-1]


def test_input_items_of_chained_response_are_its_own(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=FIVE_ITEMS)
    second = client.responses.create(model=MODEL, input="five", previous_response_id=first.id)
    items = client.responses.input_items.list(second.id).data
    assert len(items) == 1 and items[0].role == "user"


def test_input_items_bad_params(client: OpenAI, server: LabkitServer) -> None:
    r = client.responses.create(model=MODEL, input="hi")
    url = f"{server.base_url}/responses/{r.id}/input_items"
    assert (
        error_of(httpx.get(url, params={"order": "sideways"}, headers=auth_headers()), 400)["param"]
        == "order"
    )
    assert error_of(httpx.get(url, params={"limit": 0}, headers=auth_headers()), 400)["param"] == "limit"
    assert error_of(httpx.get(url, params={"limit": "x"}, headers=auth_headers()), 400)["param"] == "limit"
    assert (
        error_of(httpx.get(url, params={"after": "msg_nope"}, headers=auth_headers()), 400)["param"]
        == "after"
    )
    body = httpx.get(url, headers=auth_headers()).json()
    assert set(body) == {"object", "data", "first_id", "last_id", "has_more"}
    assert body["object"] == "list"


# ---------------------------------------------------------------- 7. store=false


def test_store_false_not_retrievable_nor_chainable(client: OpenAI) -> None:
    r = client.responses.create(model=MODEL, input="hi", store=False)
    assert r.status == "completed" and r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(r.id)
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, input="more", previous_response_id=r.id)
    err = info.value
    assert err.status_code == 400
    assert err.code == "previous_response_not_found"
    assert err.param == "previous_response_id"
    assert err.type == "invalid_request_error"
    assert err.body["message"] == f"Previous response with id '{r.id}' not found."


def test_unknown_previous_response_exact_error(server: LabkitServer) -> None:
    err = error_of(raw_post(server, {"model": MODEL, "input": "hi", "previous_response_id": "resp_x"}), 400)
    assert err == {
        "message": "Previous response with id 'resp_x' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


# ---------------------------------------------------------------- 9. API keys


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[LabkitServer]:
    with LabkitServer(args=["--api-key", "sk-good"]) as srv:
        yield srv


def test_wrong_key_is_401(keyed_server: LabkitServer) -> None:
    with OpenAI(base_url=keyed_server.base_url, api_key="sk-bad", max_retries=0) as c:
        with pytest.raises(openai.AuthenticationError) as info:
            c.responses.create(model=MODEL, input="hi")
        assert info.value.status_code == 401
        assert info.value.type == "authentication_error"
        with pytest.raises(openai.AuthenticationError):
            c.responses.retrieve("resp_x")
    err = error_of(raw_post(keyed_server, {"model": MODEL, "input": "hi"}, key="sk-bad"), 401)
    assert err["type"] == "authentication_error"
    err = error_of(raw_post(keyed_server, {"model": MODEL, "input": "hi"}, key=None), 401)
    assert err["type"] == "authentication_error"


def test_good_key_works(keyed_server: LabkitServer) -> None:
    with OpenAI(base_url=keyed_server.base_url, api_key="sk-good", max_retries=0) as c:
        r = c.responses.create(model=MODEL, input="hi")
        assert r.status == "completed"
        assert c.responses.retrieve(r.id).id == r.id
        events = list(c.responses.create(model=MODEL, input="hi", stream=True))
        assert events[-1].type == "response.completed"


def test_responses_are_private_to_their_key(
    client: OpenAI, other_client: OpenAI, server: LabkitServer
) -> None:
    r = client.responses.create(model=MODEL, input="secret", tools=[READ_FILE_TOOL])
    with pytest.raises(openai.NotFoundError):
        other_client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        other_client.responses.input_items.list(r.id)
    with pytest.raises(openai.NotFoundError):
        other_client.responses.delete(r.id)
    with pytest.raises(openai.BadRequestError) as info:
        other_client.responses.create(model=MODEL, input="more", previous_response_id=r.id)
    assert info.value.code == "previous_response_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        other_client.responses.create(model=MODEL, input=[{"type": "item_reference", "id": r.output[0].id}])
    assert info.value.param == "input[0].id"
    # no key at all is yet another owner
    error_of(httpx.get(f"{server.base_url}/responses/{r.id}"), 404)
    # the owner still has it, untouched by the failed delete
    assert client.responses.retrieve(r.id).id == r.id
