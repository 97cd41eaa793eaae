"""The official OpenAI, Anthropic and Google Gen AI Python SDKs against a running Ferroute.

Every client API (chat completions, messages, responses, Gemini's generateContent) x every
provider format (oai/* speaks OpenAI chat, ant/* Anthropic messages, rsp/* the Responses
API, gem/* Gemini), streamed and not, each running a whole tool loop: the model calls
get_weather, the client sends the result, the model answers with it. Then errors, as each
SDK raises them, the Gemini API's model list and token count, and a combo falling back
across formats. Usage: clients.py BASE_URL; exits non-zero on any failure.
"""
import json
import sys
import traceback

import anthropic
import openai
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

BASE = sys.argv[1]
oai = openai.OpenAI(base_url=BASE + "/v1", api_key="sk-local", max_retries=0)
ant = anthropic.Anthropic(base_url=BASE, api_key="sk-local", max_retries=0)
# The SDK's default API version is v1: it calls {BASE}/v1/models/{model}:generateContent.
gem = genai.Client(api_key="sk-local", http_options=types.HttpOptions(
    base_url=BASE, retry_options=types.HttpRetryOptions(attempts=1)))

CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}}}}]
ANT_TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
RESP_TOOLS = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}}}}]
GEM_CONFIG = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
        name="get_weather", parameters_json_schema={"type": "object", "properties": {"text": {"type": "string"}}})])],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    temperature=0.5, max_output_tokens=256)
QUESTION = "weather in Paris"


def chat_turn(model, messages, stream):
    if not stream:
        r = oai.chat.completions.create(model=model, messages=messages, tools=CHAT_TOOLS)
        m = r.choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in (m.tool_calls or [])]
        return m.content or "", calls, r.choices[0].finish_reason
    text, calls, finish = "", {}, None
    with oai.chat.completions.create(model=model, messages=messages, tools=CHAT_TOOLS, stream=True,
                                     stream_options={"include_usage": True}) as s:
        for chunk in s:
            if not chunk.choices:
                assert chunk.usage is not None and chunk.usage.total_tokens >= 0
                continue
            d = chunk.choices[0].delta
            text += d.content or ""
            for c in d.tool_calls or []:
                cur = calls.setdefault(c.index, ["", "", ""])
                cur[0] = c.id or cur[0]
                cur[1] = (c.function.name or cur[1]) if c.function else cur[1]
                cur[2] += (c.function.arguments or "") if c.function else ""
            finish = chunk.choices[0].finish_reason or finish
    return text, [tuple(v) for _, v in sorted(calls.items())], finish


def check_chat(model, stream):
    messages = [{"role": "user", "content": QUESTION}]
    text, calls, finish = chat_turn(model, messages, stream)
    assert finish == "tool_calls", finish
    assert len(calls) == 1 and calls[0][1] == "get_weather", calls
    assert json.loads(calls[0][2]) == {"text": QUESTION}, calls
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0][0], "type": "function", "function": {"name": "get_weather", "arguments": calls[0][2]}}]})
    messages.append({"role": "tool", "tool_call_id": calls[0][0], "content": "sunny"})
    text, calls, finish = chat_turn(model, messages, stream)
    assert (text, calls, finish) == ("tool said: sunny", [], "stop"), (text, calls, finish)


# The event types of the last streamed Messages turn, to show what arrived when a check fails.
LAST_EVENTS = []


def messages_turn(model, messages, stream):
    LAST_EVENTS.clear()
    if not stream:
        m = ant.messages.create(model=model, max_tokens=256, messages=messages, tools=ANT_TOOLS)
    else:
        with ant.messages.stream(model=model, max_tokens=256, messages=messages, tools=ANT_TOOLS) as s:
            for e in s:
                LAST_EVENTS.append(e.type)
            m = s.get_final_message()
    text = "".join(b.text for b in m.content if b.type == "text")
    uses = [(b.id, b.name, b.input) for b in m.content if b.type == "tool_use"]
    return text, uses, m.stop_reason, m.content


def check_messages(model, stream):
    messages = [{"role": "user", "content": QUESTION}]
    text, uses, stop, content = messages_turn(model, messages, stream)
    assert stop == "tool_use", (stop, content, LAST_EVENTS)
    assert len(uses) == 1 and uses[0][1] == "get_weather" and uses[0][2] == {"text": QUESTION}, uses
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in content]})
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0][0], "content": "sunny"}]})
    text, uses, stop, _ = messages_turn(model, messages, stream)
    assert (text, uses, stop) == ("tool said: sunny", [], "end_turn"), (text, uses, stop)


def responses_turn(model, items, stream):
    if not stream:
        return oai.responses.create(model=model, input=items, tools=RESP_TOOLS)
    done = None
    kinds = []
    with oai.responses.create(model=model, input=items, tools=RESP_TOOLS, stream=True) as s:
        for ev in s:
            kinds.append(ev.type)
            if ev.type == "response.completed":
                done = ev.response
    assert kinds[0] == "response.created", kinds
    assert done is not None, kinds
    return done


def check_responses(model, stream):
    items = [{"role": "user", "content": QUESTION}]
    r = responses_turn(model, items, stream)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", r.output
    assert json.loads(calls[0].arguments) == {"text": QUESTION}
    items.append({"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                  "arguments": calls[0].arguments})
    items.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"})
    r = responses_turn(model, items, stream)
    assert r.output_text == "tool said: sunny", r.output
    assert r.status == "completed" and r.usage.total_tokens > 0, r


def gemini_turn(model, contents, stream):
    chunks = ([gem.models.generate_content(model=model, contents=contents, config=GEM_CONFIG)] if not stream
              else list(gem.models.generate_content_stream(model=model, contents=contents, config=GEM_CONFIG)))
    text, calls, finish, usage = "", [], None, None
    for c in chunks:
        cand = c.candidates[0]
        for p in (cand.content.parts if cand.content and cand.content.parts else []):
            if p.function_call:
                calls.append((p.function_call.name, dict(p.function_call.args or {})))
            elif p.text and not p.thought:
                text += p.text
        finish = cand.finish_reason or finish
        usage = c.usage_metadata or usage
    assert usage is not None and usage.total_token_count is not None, chunks[-1]
    return text, calls, finish


def check_gemini(model, stream):
    contents = [types.Content(role="user", parts=[types.Part(text=QUESTION)])]
    text, calls, finish = gemini_turn(model, contents, stream)
    assert calls == [("get_weather", {"text": QUESTION})], (text, calls)
    assert finish == types.FinishReason.STOP, finish
    contents.append(types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
        name="get_weather", args={"text": QUESTION}))]))
    contents.append(types.Content(role="user", parts=[types.Part.from_function_response(
        name="get_weather", response={"result": "sunny"})]))
    text, calls, finish = gemini_turn(model, contents, stream)
    assert (text, calls) == ("tool said: sunny", []), (text, calls)


def check_gemini_api(model, _stream):
    names = [m.name for m in gem.models.list()]
    assert "models/gem/tools" in names and "models/mixed" in names, names
    # A Gemini-format target counts (the scripted provider: a token a character); another
    # format is estimated (a token for about four characters).
    n = gem.models.count_tokens(model=model, contents="twelve chars")
    assert n.total_tokens == 12, n
    n = gem.models.count_tokens(model="oai/tools", contents="twelve chars")
    assert n.total_tokens == 3, n
    # A 429 reaches the SDK as its ClientError, in Google's shape.
    try:
        gem.models.generate_content(model="gem-lim/limited", contents="x")
        raise AssertionError("no error")
    except genai_errors.ClientError as e:
        assert (e.code, e.status) == (429, "RESOURCE_EXHAUSTED"), (e.code, e.status, e.details)
    # What cannot be translated is a 400 naming it.
    try:
        gem.models.generate_content(model="oai/tools", contents="x", config=types.GenerateContentConfig(
            tools=[types.Tool(google_search=types.GoogleSearch())]))
        raise AssertionError("no error")
    except genai_errors.ClientError as e:
        assert e.code == 400 and "googleSearch" in (e.message or ""), (e.code, e.message)


def check_errors(model, _stream):
    # A 429 from either format reaches each SDK as its RateLimitError, Retry-After kept.
    try:
        oai.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
        raise AssertionError("no error")
    except openai.RateLimitError as e:
        assert e.response.headers.get("retry-after") == "9", e.response.headers
    try:
        ant.messages.create(model=model, max_tokens=16, messages=[{"role": "user", "content": "x"}])
        raise AssertionError("no error")
    except anthropic.RateLimitError as e:
        assert e.body["type"] == "error", e.body
    # What cannot be translated is a 400 naming it.
    try:
        oai.responses.create(model=model, input="x", previous_response_id="resp_1")
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert "previous_response_id" in str(e), e


def check_combo(_model, stream):
    # `mixed` tries ant/failing (529), then serves from oai/tools; `mixed-back` the reverse.
    check_chat("mixed", stream)
    check_messages("mixed-back", stream)
    check_responses("mixed", stream)
    check_gemini("mixed-back", stream)


CASES = [(f.__name__, f, m, s) for f in (check_chat, check_messages, check_responses, check_gemini)
         for m in ("oai/tools", "ant/tools", "rsp/tools", "gem/tools") for s in (False, True)]
CASES += [("check_errors", check_errors, m, False) for m in ("oai-lim/limited", "ant-lim/limited")]
CASES += [("check_gemini_api", check_gemini_api, "gem/tools", False)]
CASES += [("check_combo", check_combo, "", s) for s in (False, True)]

passed = failed = 0
for name, f, model, stream in CASES:
    try:
        f(model, stream)
        passed += 1
        print(f"ok   {name} {model} stream={stream}")
    except Exception:
        failed += 1
        print(f"FAIL {name} {model} stream={stream}")
        traceback.print_exc()
print(f"sdk: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
