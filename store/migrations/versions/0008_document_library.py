"""Each user's library of documents too long for a model's context: their passages, with
embeddings, and a full-text index over them in the database itself (SQLite FTS5, kept by
triggers; PostgreSQL a generated tsvector column under a GIN index)."""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "library_documents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("summary", sa.String(200), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("characters", sa.BigInteger, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_index("ix_library_documents_owner_sha256", "library_documents", ["owner", "sha256"])
    op.create_table(
        "library_passages",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("document_id", sa.String(64), sa.ForeignKey("library_documents.id", ondelete="CASCADE"), nullable=False),
        sa.Column("ordinal", sa.Integer, nullable=False),
        sa.Column("page", sa.Integer, nullable=True),
        sa.Column("heading", sa.Text, nullable=False, server_default=""),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_library_passages_document", "library_passages", ["document_id", "ordinal"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE library_passages ADD COLUMN search tsvector "
                   "GENERATED ALWAYS AS (to_tsvector('english', heading || ' ' || text)) STORED")
        op.execute("CREATE INDEX ix_library_passages_search ON library_passages USING GIN (search)")
        return
    # An external-content FTS5 table: the text is kept once, in library_passages; the triggers keep the index.
    op.execute("CREATE VIRTUAL TABLE library_passages_fts USING fts5(heading, text, content='library_passages', "
               "content_rowid='id', tokenize='porter unicode61')")
    op.execute("CREATE TRIGGER library_passages_indexed AFTER INSERT ON library_passages BEGIN "
               "INSERT INTO library_passages_fts(rowid, heading, text) VALUES (new.id, new.heading, new.text); END")
    op.execute("CREATE TRIGGER library_passages_unindexed AFTER DELETE ON library_passages BEGIN "
               "INSERT INTO library_passages_fts(library_passages_fts, rowid, heading, text) "
               "VALUES ('delete', old.id, old.heading, old.text); END")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.execute("DROP TRIGGER library_passages_unindexed")
        op.execute("DROP TRIGGER library_passages_indexed")
        op.execute("DROP TABLE library_passages_fts")
    op.drop_table("library_passages")
    op.drop_table("library_documents")
