"""Media kept with the chats, once each by content hash, and which chats use them."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "media",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )
    op.create_table(
        "chat_media",
        sa.Column("chat_id", sa.String(64), sa.ForeignKey("chats.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("sha256", sa.String(64), sa.ForeignKey("media.sha256"), primary_key=True),
    )
    op.create_index("ix_chat_media_sha256", "chat_media", ["sha256"])


def downgrade() -> None:
    op.drop_table("chat_media")
    op.drop_table("media")
