"""The Hermes env: hermes-agent (Nous Research's `AIAgent`) hosted per episode, its terminal and
file tools executing in a roost sandbox, its model calls going to the episode's gateway session.

    task.py          the task record: an instruction, starting files, a verifier, a reference solution
    tasks.json       roost's own offline task set (train and test splits)
    verifier.py      run a task's verifier in the sandbox → reward
    process.py       hermes-agent's process setup: a private home, offline configuration
    backend.py       hermes-agent's terminal backend over a roost Sandbox
    loop_thread.py   the event loop the sandboxes live on
    conversation.py  one AIAgent conversation on its own thread
    tools.py         the env's one action, `run_agent`
    env.py           the Env: one sandbox and one agent per episode
    scripted.py      scripted-sampler rules that play each task's reference solution
    cli.py           `roost envs hermes check|script`
"""
