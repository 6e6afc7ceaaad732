"""`roost tinker serve`: the REST surface of the Tinker API, so the official `tinker` SDK trains on
roost's own trainer unchanged (`tinker.ServiceClient(base_url=URL, api_key=KEY)`).

    wire.py      JSON request and response bodies (pydantic, unknown fields rejected)
    codec.py     the protobuf bodies of forward_backward and its output
    futures.py   the queue of submitted requests the SDK polls with retrieve_future
    sessions.py  sessions, their heartbeats and the models each owns
    backend.py   `TrainingBackend` and the Megatron one (full weight; LoRA plugs in here)
    sampling.py  sampling sessions on roost's embedded engine, and prompt logprobs
    routes.py    the routes, thin front-ends over the above
    app.py       the FastAPI app and `serve`
"""
