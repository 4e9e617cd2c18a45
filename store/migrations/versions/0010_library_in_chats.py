"""Which chat messages hold a library document's whole text, so that it counts once in its owner's
text quota (store/chats.py, _text_used)."""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "library_in_chats",
        sa.Column("message_id", ROW_ID, sa.ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("document_id", sa.String(64), sa.ForeignKey("library_documents.id", ondelete="CASCADE"), primary_key=True),
    )
    op.create_index("ix_library_in_chats_document", "library_in_chats", ["document_id"])


def downgrade() -> None:
    op.drop_table("library_in_chats")
