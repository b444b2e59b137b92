"""The ceiling reference: the same Flask + waitress stack serving static bodies.

Each file of ``--body-dir`` is served at ``/body/<file name>``, read once at start; a name
ending in ``.gz`` is sent with ``Content-Encoding: gzip`` (a compressed body, served as is).
"""

from __future__ import annotations

import argparse
import logging
import os

from flask import Flask, Response
from waitress import serve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body-dir", required=True)
    parser.add_argument("--content-type", default="application/json")
    args = parser.parse_args()
    bodies = {}
    for name in os.listdir(args.body_dir):
        with open(os.path.join(args.body_dir, name), "rb") as f:
            bodies[name] = f.read()
    app = Flask("ceiling")

    @app.route("/body/<name>")
    def static_body(name: str) -> Response:
        response = Response(bodies[name], content_type=args.content_type)
        if name.endswith(".gz"):
            response.headers["Content-Encoding"] = "gzip"
        return response

    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    serve(app, host="127.0.0.1", port=args.port, threads=8, _quiet=True)


if __name__ == "__main__":
    main()
