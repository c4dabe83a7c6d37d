"""API tokens: create (the secret is in this one response only), list, retrieve, revoke. Own tokens only."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from zico.tenants.models import ApiToken


class TokenSerializer(serializers.ModelSerializer):
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "revoked_at", "active"]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at", "active"]


class NewTokenSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="the full token; shown in this response only")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]


class TokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                   mixins.DestroyModelMixin, viewsets.GenericViewSet):
    serializer_class = TokenSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(request=TokenSerializer, responses={201: NewTokenSerializer})
    def create(self, request, *args, **kwargs):
        body = TokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        name = body.validated_data["name"].strip()
        if not name:
            raise serializers.ValidationError({"name": ["must not be blank"]})
        token, raw = ApiToken.issue(request.user, name)
        data = NewTokenSerializer(token).data
        data["token"] = raw
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: TokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        """Revoke the token (idempotent); the row stays for the audit trail."""
        token = self.get_object()
        token.revoke()
        return Response(TokenSerializer(token).data)

    def destroy(self, request, *args, **kwargs):
        """Same as revoke: the token stops working; the row is kept (204)."""
        self.get_object().revoke()
        return Response(status=status.HTTP_204_NO_CONTENT)
