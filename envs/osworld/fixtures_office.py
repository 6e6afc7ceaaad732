"""LibreOffice Calc and Writer tasks: keyboard edits of small .xlsx/.docx files, saved in place.

Inputs and gold files are written here with openpyxl and python-docx; the evaluators are
OSWorld's `compare_table`, `compare_docx_files`, `is_first_line_centered` and
`contains_page_break`. LibreOffice starts once per episode, with OSWorld's VM settings
(`fixture_kit.LO_SETTINGS`) placed in its profile by a `download` step.
"""

from __future__ import annotations

import io

from roost.envs.osworld.fixture_kit import (
    HOME,
    LO_PROFILE,
    LO_SETTINGS,
    FixtureTask,
    chain,
    cloud_file,
    download,
    execute,
    keys,
    step,
    typed,
    vm_file,
)

LO_SETTINGS_FILE = "libreoffice-registrymodifications.xcu"
SETTLE = "import time; time.sleep(1.0)"
SHEET_READY = {"role": "table", "name": "Sheet Sheet1", "focused": True}
TEXT_READY = {"role": "paragraph", "focused": True}
ROWS = [("Item", "Qty", "Price"), ("apple", 3, 2), ("melon", 2, 4), ("grape", 5, 1)]


def _xlsx(rows: list[tuple]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    for row in rows:
        sheet.append(list(row))
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _docx(paragraphs: list[str]) -> bytes:
    import docx

    document = docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _office(
    domain: str,
    app: str,
    name: str,
    instruction: str,
    filename: str,
    data: bytes,
    evaluator: dict,
    actions: list[dict],
    extra_files: dict[str, bytes],
) -> FixtureTask:
    path = f"{HOME}/Documents/{filename}"
    src = f"{domain}-{name}-{filename}"
    config = [
        execute(f"mkdir -p {HOME}/Documents"),
        download((src, path), (LO_SETTINGS_FILE, LO_PROFILE)),
        _launch_office(app, path),
    ]
    # LibreOffice shows its document a moment before it takes commands, hence the settle before
    # the first keys; saving a small file takes well under the WAIT the expert spends before DONE.
    expert = actions + [step(keys("ctrl", "s")), step("WAIT"), step("DONE")]
    files = {src: data, LO_SETTINGS_FILE: LO_SETTINGS.encode(), **extra_files}
    return FixtureTask(
        domain, name, instruction.format(path=path), config, evaluator, expert, [f"libreoffice_{app}"], files
    )


def _launch_office(app: str, path: str) -> dict:
    """Start LibreOffice with a profile of this desktop's own. LibreOffice joins a running instance
    found through a socket in /tmp named after the profile's path, and local desktops share /tmp:
    with one profile path, a second desktop's document would open on the first desktop. The
    profile is named after the X display (unique among the host's desktops) and gets OSWorld's
    settings (`LO_SETTINGS`, put in the default profile by the `download` step)."""
    profile = f"{HOME}/.config/libreoffice/display-${{DISPLAY#:}}"
    command = (
        f'mkdir -p "{profile}/user" && cp {LO_PROFILE} "{profile}/user/" && '
        f'exec soffice -env:UserInstallation=file://"{profile}" --{app} --norestore --nologo {path}'
    )
    return {"type": "launch", "parameters": {"command": command, "shell": True}}


def _calc(name: str, instruction: str, gold_rows: list[tuple], keys_code: str) -> FixtureTask:
    filename = f"{name}.xlsx"
    gold = f"calc-{name}-gold.xlsx"
    evaluator = {
        "func": "compare_table",
        "result": vm_file(f"{HOME}/Documents/{filename}"),
        "expected": cloud_file(gold),
        "options": {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
    }
    return _office(
        "libreoffice_calc",
        "calc",
        name,
        instruction,
        filename,
        _xlsx(ROWS),
        evaluator,
        [step(chain(SETTLE, keys("ctrl", "Home"), keys_code), SHEET_READY)],
        {gold: _xlsx(gold_rows)},
    )


def _down(n: int) -> str:
    return f"import pyautogui; pyautogui.press('down', presses={n}, interval=0.05)"


def _right(n: int) -> str:
    return f"import pyautogui; pyautogui.press('right', presses={n}, interval=0.05)"


def calc_tasks() -> list[FixtureTask]:
    totals = [sum(r[1] for r in ROWS[1:]), sum(r[2] for r in ROWS[1:])]
    return [
        _calc(
            "add-row",
            "In {path}, open in LibreOffice Calc, add the row kiwi, 4, 3 under the last row; save it.",
            ROWS + [("kiwi", 4, 3)],
            chain(_down(4), typed("kiwi\t4\t3\n")),
        ),
        _calc(
            "add-row-2",
            "In {path}, open in LibreOffice Calc, add the row lime, 7, 5 under the last row; save it.",
            ROWS + [("lime", 7, 5)],
            chain(_down(4), typed("lime\t7\t5\n")),
        ),
        _calc(
            "qty-total",
            "In {path}, open in LibreOffice Calc, write Total in A5 and the sum of the quantities "
            "above in B5; save it.",
            ROWS + [("Total", totals[0])],
            chain(_down(4), typed("Total\t=SUM(B2:B4)\n")),
        ),
        _calc(
            "price-total",
            "In {path}, open in LibreOffice Calc, write Sum in A5 and the sum of the prices above in C5; save it.",
            ROWS + [("Sum", None, totals[1])],
            chain(_down(4), typed("Sum\t"), _right(1), typed("=SUM(C2:C4)\n")),
        ),
        _calc(
            "cost-column",
            "In {path}, open in LibreOffice Calc, add a column Cost in D holding Qty times Price "
            "for each row; save it.",
            [r + (("Cost",) if i == 0 else (r[1] * r[2],)) for i, r in enumerate(ROWS)],
            chain(_right(3), typed("Cost\n=B2*C2\n=B3*C3\n=B4*C4\n")),
        ),
        _calc(
            "fix-qty",
            "In {path}, open in LibreOffice Calc, the quantity of melon should be 9: fix it and save.",
            [ROWS[0], ROWS[1], ("melon", 9, 4), ROWS[3]],
            chain(_down(2), _right(1), typed("9\n")),
        ),
    ]


PARAGRAPHS = [
    ["Quarterly report", "Sales grew in every region.", "Costs stayed flat."],
    ["Meeting notes", "The team agreed on the plan.", "Next meeting on Friday."],
]


def _writer(
    name: str,
    instruction: str,
    paragraphs: list[str],
    evaluator: dict,
    code: str,
    extra_files: dict[str, bytes] | None = None,
) -> FixtureTask:
    filename = f"{name}.docx"
    evaluator = {**evaluator, "result": vm_file(f"{HOME}/Documents/{filename}")}
    return _office(
        "libreoffice_writer",
        "writer",
        name,
        instruction,
        filename,
        _docx(paragraphs),
        evaluator,
        [step(chain(SETTLE, keys("ctrl", "Home"), code), TEXT_READY)],
        extra_files or {},
    )


def _append_paragraph(i: int, sentence: str) -> FixtureTask:
    gold = f"writer-append-{i}-gold.docx"
    paragraphs = PARAGRAPHS[i]
    return _writer(
        f"append-{i}",
        f"Add a new last paragraph '{sentence}' to {{path}}, open in LibreOffice Writer, and save it.",
        paragraphs,
        {"func": "compare_docx_files", "expected": cloud_file(gold)},
        chain(keys("ctrl", "End"), keys("enter"), typed(sentence)),
        {gold: _docx(paragraphs + [sentence])},
    )


def _rewrite_title(i: int, title: str) -> FixtureTask:
    gold = f"writer-title-{i}-gold.docx"
    paragraphs = PARAGRAPHS[i]
    return _writer(
        f"retitle-{i}",
        f"Change the first line of {{path}}, open in LibreOffice Writer, to '{title}' and save it.",
        paragraphs,
        {"func": "compare_docx_files", "expected": cloud_file(gold)},
        chain(keys("shift", "End"), typed(title)),
        {gold: _docx([title] + paragraphs[1:])},
    )


def writer_tasks() -> list[FixtureTask]:
    return (
        [
            _writer(
                f"center-title-{i}",
                "Center the first line of {path}, open in LibreOffice Writer, and save it.",
                PARAGRAPHS[i],
                {"func": "is_first_line_centered"},
                keys("ctrl", "e"),
            )
            for i in range(2)
        ]
        + [
            _writer(
                f"page-break-{i}",
                "Insert a page break right after the first line of {path}, open in LibreOffice Writer, and save it.",
                PARAGRAPHS[i],
                {"func": "contains_page_break", "expected": {"type": "rule", "rules": {"page_break_count": 1}}},
                chain(keys("down"), keys("ctrl", "enter")),
            )
            for i in range(2)
        ]
        + [_append_paragraph(0, "Outlook: steady growth."), _append_paragraph(1, "Action items follow.")]
        + [
            _rewrite_title(0, "Annual report"),
            _rewrite_title(1, "Board minutes"),
        ]
    )
