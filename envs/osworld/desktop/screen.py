"""The screen: a PNG screenshot with the pointer drawn in, the screen size, the pointer position.

Grabbed through X (PIL's XCB grab); the pointer image comes from the XFIXES extension, as the
X server itself does not draw it into the frame buffer.
"""

from __future__ import annotations

import io


def screenshot_png(display: str) -> bytes:
    from PIL import ImageGrab

    image = ImageGrab.grab(xdisplay=display).convert("RGB")
    cursor = _cursor(display)
    if cursor is not None:
        sprite, x, y = cursor
        image.paste(sprite, (x, y), sprite)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


def screen_size(display: str) -> tuple[int, int]:
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display)
    try:
        screen = conn.screen()
        return screen.width_in_pixels, screen.height_in_pixels
    finally:
        conn.close()


def pointer(display: str) -> tuple[int, int]:
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display)
    try:
        reply = conn.screen().root.query_pointer()
        return reply.root_x, reply.root_y
    finally:
        conn.close()


def window_size(display: str, app_class_name: str) -> tuple[int, int] | None:
    """(width, height) of the first managed window whose WM_CLASS holds `app_class_name`
    (any case), or None."""
    from Xlib import X, error
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display)
    try:
        root = conn.screen().root
        listed = root.get_full_property(conn.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
        for window_id in listed.value if listed else []:
            try:
                window = conn.create_resource_object("window", window_id)
                if app_class_name.lower() in [n.lower() for n in (window.get_wm_class() or ())]:
                    geometry = window.get_geometry()
                    return geometry.width, geometry.height
            except error.XError:
                continue  # closed while listed
        return None
    finally:
        conn.close()


def _cursor(display: str):
    """(RGBA sprite, left, top) of the pointer, or None where XFIXES is not there."""
    from PIL import Image
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display)
    try:
        if not conn.has_extension("XFIXES"):
            return None
        conn.xfixes_query_version()
        cur = conn.xfixes_get_cursor_image(conn.screen().root)
        argb = b"".join(int(p & 0xFFFFFFFF).to_bytes(4, "little") for p in cur.cursor_image)
        sprite = Image.frombytes("RGBA", (cur.width, cur.height), argb, "raw", "BGRA")
        return sprite, cur.x - cur.xhot, cur.y - cur.yhot
    except Exception:  # noqa: BLE001 - a screenshot without the pointer beats no screenshot
        return None
    finally:
        conn.close()
