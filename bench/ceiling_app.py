"""The ceiling reference: the same Flask + waitress stack serving a static body of a given size."""

from __future__ import annotations

import argparse
import logging

from flask import Flask, Response
from waitress import serve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--content-type", default="application/json")
    args = parser.parse_args()
    with open(args.body_file, "rb") as f:
        body = f.read()
    app = Flask("ceiling")

    @app.route("/body")
    def static_body() -> Response:
        return Response(body, content_type=args.content_type)

    logging.getLogger("waitress.queue").setLevel(logging.ERROR)
    serve(app, host="127.0.0.1", port=args.port, threads=8, _quiet=True)


if __name__ == "__main__":
    main()
