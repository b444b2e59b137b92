"""Usage kept on the node: each tick's billed energy added into hourly and daily rows of an
embedded SQLite database, and the reports made from them."""
