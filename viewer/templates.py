"""The viewer's HTML templates (jinja2, autoescaped); CSS and the little script inline, nothing fetched."""

from __future__ import annotations

BASE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{{ title }} · roost view</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0 1.5em 2em;color:#222}
nav{padding:.6em 0;border-bottom:1px solid #ddd;margin-bottom:1em}nav a{margin-right:1em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}.num{text-align:right;font-variant-numeric:tabular-nums}.muted{color:#777}
.note{background:#fff4d6;border:1px solid #e8c96a;padding:.4em .8em;margin:.5em 0}
.error{background:#fde2e2;border:1px solid #e29b9b;padding:.6em 1em}
.plots{display:flex;flex-wrap:wrap;gap:10px}.plot{border:1px solid #eee}
.plot .t{font-size:12px;font-weight:600}.plot .l{font-size:10px;fill:#666}.plot .ax{stroke:#bbb}
.plot .ln{fill:none;stroke:#2a6fdb;stroke-width:1.5}.plot circle{fill:#2a6fdb}
.side{display:flex;gap:10px;overflow-x:auto}.episode{min-width:240px;max-width:320px;border:1px solid #ddd;padding:6px}
.turn{border-top:1px dashed #ddd;padding:3px 0;font-size:12px;white-space:pre-wrap;word-break:break-word}
.tree ul{margin:0;padding-left:1.4em}.kind{font-size:11px;padding:0 4px;border-radius:3px;background:#e8eefc}
.kind.fork{background:#ffd8a8;font-weight:600}.kind.root{background:#d3f0d3}
.msg{border-left:3px solid #ccc;margin:.4em 0;padding:.2em .6em;white-space:pre-wrap;word-break:break-word}
.msg img.image{display:block;max-width:480px;max-height:360px;margin:.3em 0;border:1px solid #ddd}
.msg.assistant{border-color:#2a6fdb}.msg.tool{border-color:#8a5}.msg.system{border-color:#999}
.tokens{font:12px/1.9 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
.tok{border-radius:2px}.tok.p{color:#888}.tok.p.shared{color:#aaa;background:#f3f3f3}
.tok.s{color:#000}.tok:hover{outline:1px solid #333}#hover{position:sticky;top:0;background:#fff;
border:1px solid #ccc;padding:2px 6px;font:12px ui-monospace,monospace;min-height:1.4em}
</style></head><body>
<nav><a href="/">run</a><a href="/groups">groups</a>{% block crumbs %}{% endblock %}</nav>
{% for n in notes %}<div class="note">{{ n }}</div>{% endfor %}
{% block content %}{% endblock %}</body></html>"""

ERROR = """{% extends "base.html" %}{% block content %}<h1>{{ status }}</h1>
<div class="error" id="error">{{ message }}</div>{% endblock %}"""

PAGER = """{% macro pager(rows, page, url) %}<p>
{% if page.offset > 0 %}<a href="{{ url }}offset={{ [page.offset - page.limit, 0]|max }}">← previous</a>{% endif %}
rows {{ page.offset + 1 }}–{{ page.offset + rows|length }}
{% if rows|length == page.limit %}<a href="{{ url }}offset={{ page.offset + page.limit }}" id="next">next →</a>{% endif %}
</p>{% endmacro %}"""

RUN = """{% extends "base.html" %}{% block content %}<h1>{{ title }}</h1>
{% if store_error %}<div class="error">{{ store_error }}</div>{% endif %}
{% if evals %}<h2>Evaluations</h2><table id="evals"><tr><th>label</th><th>split</th><th>episodes</th><th>scored</th>
<th>success rate</th><th>mean reward</th><th>left out</th><th>groups</th></tr>
{% for label, e in evals.items() %}<tr><td>{{ label }}</td><td>{{ e.split }}</td><td class="num">{{ e.episodes }}</td>
<td class="num">{{ e.scored }}</td><td class="num">{{ fmt(e.success_rate) }}</td><td class="num">{{ fmt(e.mean_reward) }}</td>
<td>{{ e.left_out or '' }}</td><td><a href="/groups?prefix=eval-{{ label }}-">{{ e.groups }}</a></td></tr>{% endfor %}</table>{% endif %}
{% for stage, stage_plots in plots %}<h2>Training curves: {{ stage }}</h2><div class="plots">
{% for p in stage_plots %}{{ p.svg|safe }}{% endfor %}</div>{% endfor %}
{% if steps %}<h2>Steps (weight versions)</h2><table id="steps"><tr><th>weights</th><th>sessions played</th></tr>
{% for s in steps %}<tr><td><a href="/groups?version={{ s.version|urlencode }}">v{{ s.version }}</a></td>
<td class="num">{{ s.sessions }}</td></tr>{% endfor %}</table>{% endif %}
{% if files %}<h2>Run folder</h2><p>{% for f in files %}{% if f.endswith('/') %}{{ f }}{% else %}
<a href="/files/{{ f|urlencode }}">{{ f }}</a>{% endif %} {% endfor %}</p>{% endif %}{% endblock %}"""

GROUPS = """{% extends "base.html" %}{% from "pager.html" import pager %}{% block content %}<h1>{{ title }}</h1>
<table id="groups"><tr><th>group</th><th>sessions</th><th>finished</th><th>mean return</th></tr>
{% for g in rows %}<tr><td><a href="/group?id={{ g.group_id|urlencode }}">{{ g.group_id }}</a></td>
<td class="num">{{ g.sessions }}</td><td class="num">{{ g.finished }}</td><td class="num">{{ fmt(g.mean_return) }}</td></tr>
{% endfor %}</table>{{ pager(rows, page, url) }}{% endblock %}"""

GROUP = """{% extends "base.html" %}{% from "pager.html" import pager %}{% block content %}<h1>{{ title }}</h1>
<div class="side" id="episodes">{% for e in episodes %}<div class="episode">
<a href="/sessions/{{ e.row.session_id }}"><b>{{ e.row.session_id }}</b></a><br>
status {{ e.row.status }} {{ e.row.outcome }}<br>
return <b class="return">{{ fmt(e.row.ret) }}</b> · advantage <b class="advantage">{{ fmt(e.row.advantage) }}</b>
· {{ e.row.calls }} calls
{% for c in e.calls %}<div class="turn"><a href="/calls/{{ c.call_id }}">#{{ c.seq }}</a> {{ c.agent_id }}
{% if c.kind == 'fork' %}<span class="kind fork">fork</span>{% endif %}
{% if c.advantage is not none %}A={{ fmt(c.advantage) }}{% endif %}{% if c.reward is not none %} r={{ fmt(c.reward) }}{% endif %}
{{ c.reply|truncate(200) }}</div>{% endfor %}</div>{% endfor %}</div>{{ pager(episodes, page, url) }}{% endblock %}"""

SESSION = """{% extends "base.html" %}{% macro node(n) %}<li><a href="/calls/{{ n.call.call_id }}">#{{ n.call.seq }}</a>
<span class="kind {{ n.call.kind }}">{{ n.call.kind }}</span>
{% if n.call.kind == 'fork' %}shares {{ n.call.shared_prefix_len }} tokens with #{{ n.parent_seq }}{% endif %}
{{ n.call.prompt_len }}+{{ n.call.sampled_len }} tokens · v{{ n.call.weight_version }}
{% if n.call.advantage is not none %}· A={{ fmt(n.call.advantage) }}{% endif %}
{% if n.call.reward is not none %}· r={{ fmt(n.call.reward) }}{% endif %}
{% if call_times.get(n.call.call_id) %}· <span class="time">{{ call_times[n.call.call_id] }}</span>{% endif %}
<span class="muted">{{ n.call.reply|truncate(80) }}</span>
{% if n.children %}<ul>{% for c in n.children %}{{ node(c) }}{% endfor %}</ul>{% endif %}</li>{% endmacro %}
{% block crumbs %}{% if s.group_id %}<a href="/group?id={{ s.group_id|urlencode }}">group {{ s.group_id }}</a>{% endif %}{% endblock %}
{% block content %}<h1>{{ title }}</h1>
<p>status {{ s.status }} {{ s.outcome }} · return <b id="return">{{ fmt(s.ret) }}</b> · {{ s.calls }} calls · task <code>{{ s.task|tojson }}</code></p>
{% if s.finish_info %}<p>finish <code>{{ s.finish_info|tojson }}</code></p>{% endif %}
<h2>Time</h2><table id="time"><tr><th>part</th><th>time</th><th>of wall</th></tr>
{% for part, ms, share in time_rows %}<tr><td>{{ part }}</td><td class="num">{{ ms }}</td><td class="num">{{ share }}</td></tr>{% endfor %}</table>
<h2>Rewards</h2><table id="rewards"><tr><th>to</th><th>reward</th><th>info</th></tr>
{% for agent, call, r, info in rewards %}<tr><td>{% if call %}call <a href="/calls/{{ call }}">{{ call }}</a>{% elif agent %}agent {{ agent }}{% else %}session{% endif %}</td>
<td class="num">{{ fmt(r) }}</td><td><code>{{ info|tojson|truncate(200) }}</code></td></tr>{% endfor %}</table>
<h2>Agents and token trees</h2>{% for agent, parent, roots in trees %}<div class="tree" data-agent="{{ agent }}">
<h3>{{ agent }}{% if parent %} <span class="muted">(spawned by {{ parent }})</span>{% endif %}</h3>
<ul>{% for n in roots %}{{ node(n) }}{% endfor %}</ul></div>{% endfor %}
{% if more_calls %}<p><a href="/sessions/{{ s.session_id }}?offset={{ page.offset + page.limit }}">next {{ page.limit }} calls →</a></p>{% endif %}
{% endblock %}"""

CALL = """{% extends "base.html" %}{% block crumbs %}<a href="/sessions/{{ c.row.session_id }}">session {{ c.row.session_id }}</a>{% endblock %}
{% block content %}<h1>{{ title }}</h1>
<p>agent {{ c.row.agent_id }} · seq {{ c.row.seq }} · <span class="kind {{ c.row.kind }}">{{ c.row.kind }}</span>
{% if c.row.parent_call_id %} of <a href="/calls/{{ c.row.parent_call_id }}">{{ c.row.parent_call_id }}</a>
(shares {{ c.row.shared_prefix_len }} tokens){% endif %} · model {{ c.model }}{% if c.adapter %} · LoRA adapter {{ c.adapter }}{% endif %} · weights v{{ c.row.weight_version }}
· finish <code>{{ c.row.finish_reason|tojson }}</code>{% if c.row.advantage is not none %} · advantage {{ fmt(c.row.advantage) }}{% endif %}
{% if c.row.reward is not none %} · reward {{ fmt(c.row.reward) }}{% endif %}</p>
{% if c.trace %}<p id="trace">trace {% if trace_link %}<a href="{{ trace_link }}"><code>{{ c.trace.get('trace_id', '') }}</code></a>{% else %}<code>{{ c.trace.get('trace_id', '') }}</code>{% endif %} span <code>{{ c.trace.get('span_id', '') }}</code></p>{% endif %}
<h2>Messages</h2>{% for m in messages %}<div class="msg {{ m.role }}"><b>{{ m.role }}</b>{% if m.name %} ({{ m.name }}){% endif %}
{{ m.text }}{% for src in m.images %}<img class="image" src="{{ src }}" alt="image {{ loop.index }} of the message">{% endfor %}{% for t in m.tool_calls %}<div class="toolcall">→ <b>{{ t.name }}</b> <code>{{ t.arguments }}</code></div>{% endfor %}</div>{% endfor %}
<h2>Reply</h2><div class="msg assistant" id="reply">{% if reply.reasoning %}<i>{{ reply.reasoning }}</i>
{% endif %}{{ reply.text }}{% for t in reply.tool_calls %}<div class="toolcall">→ <b>{{ t.name }}</b> <code>{{ t.arguments }}</code></div>{% endfor %}</div>
<h2>Tokens {{ w.start }}–{{ w.start + w.ids|length }} of {{ w.total }}</h2>
<p>prompt {{ w.prompt_len }} tokens (grey; lighter: shared with the parent call), sampled {{ w.total - w.prompt_len }}.
Colour by {% for k in colourings %}<a href="?colour={{ k }}&start={{ w.start }}"{% if k == colour %} id="colour-on"{% endif %}>{{ k }}</a> {% endfor %}
{% if tokenizer %}· text from {{ tokenizer }}{% else %}· no tokenizer found: ids shown{% endif %}</p>
<p>{% if w.start > 0 %}<a href="?colour={{ colour }}&start={{ [w.start - limit, 0]|max }}">← earlier tokens</a> {% endif %}
{% if w.start + w.ids|length < w.total %}<a id="later" href="?colour={{ colour }}&start={{ w.start + limit }}">later tokens →</a> {% endif %}
{% if w.prompt_len > w.start + w.ids|length %}<a href="?colour={{ colour }}&start={{ w.prompt_len }}">sampled tokens →</a>{% endif %}</p>
<div id="hover">hover a token</div>
<div class="tokens" id="tokens">{% for t in cells %}<span class="{{ t.css }}"{% if t.colour %} style="background:{{ t.colour }}"{% endif %} title="{{ t.hover }}">{{ t.text }}</span>{% endfor %}</div>
<script>document.getElementById('tokens').addEventListener('mouseover',e=>{if(e.target.title)document.getElementById('hover').textContent=e.target.title});</script>
{% endblock %}"""

TEMPLATES = {
    "base.html": BASE,
    "error.html": ERROR,
    "pager.html": PAGER,
    "run.html": RUN,
    "groups.html": GROUPS,
    "group.html": GROUP,
    "session.html": SESSION,
    "call.html": CALL,
}
